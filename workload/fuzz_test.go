package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inboxbench/inboxbench/envelope"
)

// fuzzMaxEvents keeps generated plans small enough for the fuzzer's pace.
const fuzzMaxEvents = 5000

// FuzzParse feeds arbitrary bytes to the workload parser. Whatever it
// accepts must validate again, survive a YAML round trip unchanged, and
// (when small enough to generate quickly) generate a plan that matches the
// spec: exactly Events events, versions without gaps, an oracle without
// overflow, and envelopes that decode. A spec that Parse accepts but
// Generate cannot finish would hang here; `make test` runs this briefly,
// seeded with the shipped workloads (testdata/fuzz/FuzzParse).
func FuzzParse(f *testing.F) {
	shipped, _ := filepath.Glob("../workloads/*.yaml")
	for _, p := range shipped {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		defer hangGuard(in)()
		s, err := Parse(in)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted, then Validate fails: %v", err)
		}
		out, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("accepted spec does not marshal: %v", err)
		}
		s2, err := Parse(out)
		if err != nil {
			t.Fatalf("accepted spec does not parse again after a round trip: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v", *s, *s2)
		}
		if s.Events <= fuzzMaxEvents {
			checkPlan(t, s, Generate(s))
		}
	})
}

// checkPlan holds a generated plan to its spec.
func checkPlan(t *testing.T, s *Spec, p *Plan) {
	t.Helper()
	if len(p.Events) != s.Events {
		t.Fatalf("generated %d events for events: %d", len(p.Events), s.Events)
	}
	if len(p.Expected) != s.Aggregates {
		t.Fatalf("oracle has %d aggregates for aggregates: %d", len(p.Expected), s.Aggregates)
	}
	version := map[string]int64{}
	for _, e := range p.Events {
		if e.AggregateVersion != version[e.Subject]+1 {
			t.Fatalf("%s: version %d after %d", e.Subject, e.AggregateVersion, version[e.Subject])
		}
		version[e.Subject] = e.AggregateVersion
		if e.Amount < 1 {
			t.Fatalf("%s: amount %d (a sum overflowed, or an amount below min)", e.ID, e.Amount)
		}
	}
	for agg, st := range p.Expected {
		if st.Version != version[agg] || st.Balance < st.Version*s.Amount.Min {
			t.Fatalf("%s: oracle %+v after %d events of at least %d", agg, st, version[agg], s.Amount.Min)
		}
	}
	b, err := s.Encode(p.Publishes[len(p.Publishes)-1].Event)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envelope.Unmarshal(b); err != nil {
		t.Fatalf("encoded envelope does not decode: %v", err)
	}
	// Padding adds a data attribute (10 bytes before any padding), so an
	// envelope within 10 bytes of message_size stays as it is; a padded one
	// is exactly message_size.
	if e, _ := envelope.Unmarshal(b); len(b) < s.MessageSize-len(`,"data":""`) || e.Data != "" && len(b) != s.MessageSize {
		t.Fatalf("encoded %d bytes (data %d) for message_size %d", len(b), len(e.Data), s.MessageSize)
	}
}

// hangGuard crashes the fuzzing process when one input runs longer than a
// generous bound: the fuzzer has no timeout of its own, and a crash makes
// it record the input (a spec that never finishes generating would
// otherwise stall the run silently).
func hangGuard(in []byte) (stop func()) {
	t := time.AfterFunc(30*time.Second, func() {
		panic(fmt.Sprintf("one input took more than 30s: %q", in))
	})
	return func() { t.Stop() }
}
