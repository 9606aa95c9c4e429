package runner

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/workload"
)

// TestRateSearchThroughTheBaseline runs a short rate search through the
// database-only baseline with every fault of the plan: steps at rising
// rates, a maximum sustainable rate with its limit, the latency at a
// fraction of it, and the checker's PASS over every segment published.
func TestRateSearchThroughTheBaseline(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec := faultsSpec(t, "")
	spec.Faults.CrashAfterCommit = 0
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: []string{"batch"},
		Output: Output{Dir: t.TempDir()}, RunID: runID("r"), KeepData: true, Measure: Measure{Latency: true, Audit: true}, Limits: Limits{Stall: 20 * time.Second},
		Search: &RateSearch{Step: 1500 * time.Millisecond, StartRate: 200, MaxSteps: 5, Fractions: []float64{0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	c := run.Cells[0]
	if c.Invariants.Verdict != "PASS" || c.Error != "" || c.Mode != "rate-search" || c.Rate == nil {
		t.Fatalf("%s; mode %q", describe(c), c.Mode)
	}
	r := c.Rate
	if len(r.Steps) == 0 || len(r.Steps) > 5 || r.MSR <= 0 || r.LimitedBy == "" || len(r.At) != 1 || c.Throughput.EventsPerS != r.MSR {
		t.Fatalf("rate search %+v", r)
	}
	if at := r.At[0]; at.Fraction != 0.5 || at.E2E.Count == 0 || at.Achieved <= 0 {
		t.Fatalf("at 50%%: %+v", at)
	}
	for _, st := range r.Steps {
		if st.Achieved <= 0 || st.E2E.Count == 0 {
			t.Errorf("step %+v measured nothing", st)
		}
	}
	if c.Counters.Effects == 0 || c.Counters.Parked == 0 || c.Counters.Duplicates == 0 {
		t.Errorf("the segments did not carry the workload's faults: %+v", c.Counters)
	}
	// Each step was judged once it drained and its rows then went: the
	// inbox ends empty, while the effects count every step's.
	conn, err := pgx.Connect(ctx, cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{c.Schema}.Sanitize()+".inbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d inbox rows left after %d effects: the steps' tables were not emptied between them", rows, c.Counters.Effects)
	}
}

// TestBacklogDrain: with Backlog the whole stream is published before the
// consumers start, and the cell is judged as any other.
func TestBacklogDrain(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec := faultsSpec(t, "")
	plan := workload.Generate(spec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: []string{"tx"},
		Output: Output{Dir: t.TempDir()}, RunID: runID("b"), Measure: Measure{Latency: true, Audit: true}, Limits: Limits{Stall: 20 * time.Second}, Stream: Stream{Backlog: true}})
	if err != nil {
		t.Fatal(err)
	}
	c := run.Cells[0]
	if c.Invariants.Verdict != "PASS" || c.Mode != "backlog" || c.Counters.Published != int64(len(plan.Publishes)) || c.Throughput.EventsPerS <= 0 {
		t.Fatalf("%s; mode %q", describe(c), c.Mode)
	}
}
