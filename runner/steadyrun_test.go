package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// TestSteadyRoundsThroughTheBaseline: a steady-state workload with
// faults, two rounds, two strategies. Every round of every cell runs for
// its warm-up and window (the stream outlasts one chunk of events), is
// judged PASS over everything it published, and the cells carry their
// rounds, windows, stats and per-round ratios.
func TestSteadyRoundsThroughTheBaseline(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec, err := workload.Parse([]byte(`
name: test-steady
seed: 9
aggregates: 50
events: 2000
message_size: 128
consumers: 2
shards: 4
batch_size: 50
warmup: 1s
measure: 2s
warmup_max: 6s
faults:
  duplicate_republish: 0.02
  out_of_order: 0.01
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: []string{"tx", "batch"}, Rounds: 2,
		Output: Output{Dir: t.TempDir()}, RunID: fmt.Sprintf("st%d", time.Now().UnixNano()%1e9), Measure: Measure{Latency: true, Audit: true},
		Limits: Limits{Stall: 20 * time.Second}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if run.Rounds != 2 || len(run.Cells) != 2 {
		t.Fatalf("rounds %d, cells %d: want 2 and 2", run.Rounds, len(run.Cells))
	}
	for _, c := range run.Cells {
		if c.Invariants.Verdict != results.VerdictPass || c.Error != "" || len(c.Rounds) != 2 || c.Stats == nil {
			t.Fatalf("%s (rounds %d, stats %v)", describe(c), len(c.Rounds), c.Stats)
		}
		for i, r := range c.Rounds {
			w := r.Window
			if w == nil || w.MeasuredS < 2 || w.Events == 0 || w.WarmupS < 1 || w.WarmupS > 6.5 {
				t.Errorf("%s round %d: window %+v", c.Strategy, i+1, w)
				continue
			}
			if r.Round != i+1 || r.Order == 0 {
				t.Errorf("%s round %d: round %d order %d", c.Strategy, i+1, r.Round, r.Order)
			}
			if r.Counters.Effects <= int64(spec.Events) {
				t.Errorf("%s round %d: %d effects: the stream did not go past its first chunk of %d", c.Strategy, i+1, r.Counters.Effects, spec.Events)
			}
			if got := float64(w.Events) / w.MeasuredS; got != r.Throughput.EventsPerS {
				t.Errorf("%s round %d: events/s %v is not the window's %v", c.Strategy, i+1, r.Throughput.EventsPerS, got)
			}
		}
	}
	// The order alternates: the cell first in round 1 is last in round 2.
	if a, b := run.Cells[0].Rounds, run.Cells[1].Rounds; a[0].Order != 1 || a[1].Order != 2 || b[0].Order != 2 || b[1].Order != 1 {
		t.Errorf("orders: tx %d,%d batch %d,%d; want 1,2 and 2,1", a[0].Order, a[1].Order, b[0].Order, b[1].Order)
	}
}
