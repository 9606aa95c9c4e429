package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/results"
)

// A cell whose strategy calls the external service gets a row with the
// service's delay and its calls; the others none.
func TestExternalTable(t *testing.T) {
	run := &results.Run{Cells: []results.Cell{
		{Broker: "none", Strategy: "tx"},
		{Broker: "kafka", Strategy: "ext-key", External: &results.External{DelayMs: 5, TimeoutMs: 1000, Calls: 4100, Effects: 4000, Replays: 100},
			Latency: results.Latencies{ExternalCall: results.Summary{Count: 1, P50: 5200, P99: 7100}}},
	}}
	rows := ExternalRows(run)
	if len(rows) != 1 || rows[0][0] != "kafka/ext-key" || rows[0][1] != "5ms" || rows[0][2] != "4,100" || rows[0][3] != "4,000" || rows[0][4] != "100" {
		t.Fatalf("rows %q", rows)
	}
	var b bytes.Buffer
	if err := WriteSummary(&b, run); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"EXTERNAL E2E P99", "kafka/ext-key", "5.2ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
