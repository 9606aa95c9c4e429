package results

import (
	"encoding/json"
	"testing"
)

func TestWorkloadHashIsCanonical(t *testing.T) {
	a := WorkloadHash(json.RawMessage(`{"name":"w","seed":1,"faults":{"a":0.1,"b":2}}`))
	b := WorkloadHash(json.RawMessage("{\n  \"seed\": 1,\n  \"faults\": {\"b\": 2, \"a\": 0.1},\n  \"name\": \"w\"\n}"))
	c := WorkloadHash(json.RawMessage(`{"name":"w","seed":2,"faults":{"a":0.1,"b":2}}`))
	if a != b {
		t.Error("key order or whitespace changed the workload hash")
	}
	if a == c || len(a) != 64 {
		t.Errorf("hashes %s %s", a, c)
	}
}
