package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// steadySpec is a small steady-state workload (a warm-up until the rate
// settles, a window of two seconds) with what extra adds: its name, its
// seed, its faults.
func steadySpec(t *testing.T, extra string) *workload.Spec {
	t.Helper()
	return parseSpec(t, `
aggregates: 50
events: 2000
message_size: 128
consumers: 2
shards: 4
batch_size: 50
warmup: 1s
measure: 2s
warmup_max: 6s
`+extra)
}

// TestSteadyRoundsThroughTheBaseline: a steady-state workload with
// faults, two rounds, two strategies. Every round of every cell runs for
// its warm-up and window (the stream outlasts one chunk of events), is
// judged PASS over everything it published, and the cells carry their
// rounds, windows, stats and per-round ratios.
func TestSteadyRoundsThroughTheBaseline(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec := steadySpec(t, `
name: test-steady
seed: 9
faults:
  duplicate_republish: 0.02
  out_of_order: 0.01
`)
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

// TestWarmupRoundsAreNotKept: a warm-up round runs every cell first and
// keeps nothing of a cell that passed it; a cell that failed its checks
// there is kept, as round 0, so that the failure is not lost. Once the
// result is written, the schemas of the rounds that passed, the warm-up's
// among them, are dropped and those of the failed rounds stay.
func TestWarmupRoundsAreNotKept(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec := steadySpec(t, `
name: test-warmup-rounds
seed: 11
warmup_rounds: 1
faults:
  out_of_order: 0.05
`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id := fmt.Sprintf("wu%d", time.Now().UnixNano()%1e9)
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: []string{"batch", "broken-no-version"},
		WarmupRounds: -1, Output: Output{Dir: t.TempDir()}, RunID: id,
		Measure: Measure{Latency: true, Audit: true}, Limits: Limits{Stall: 20 * time.Second}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if run.WarmupRounds != 1 || len(run.Cells) != 2 {
		t.Fatalf("warm-up rounds %d, cells %d: want 1 and 2", run.WarmupRounds, len(run.Cells))
	}
	ok, broken := run.Cells[0], run.Cells[1]
	if ok.Invariants.Verdict != results.VerdictPass || len(ok.Rounds) != 0 || ok.Round != 1 {
		t.Errorf("batch kept its warm-up: %s, %d rounds, round %d", describe(ok), len(ok.Rounds), ok.Round)
	}
	if broken.Invariants.Verdict != results.VerdictFail || len(broken.Rounds) != 2 || broken.Rounds[0].Round != 0 || broken.Rounds[1].Round != 1 {
		t.Fatalf("broken-no-version: %s with %d rounds: want FAIL with its warm-up kept as round 0", describe(broken), len(broken.Rounds))
	}
	if n := broken.Rounds[0].Notes; len(n) == 0 || !strings.Contains(n[len(n)-1], "warm-up") {
		t.Errorf("the kept warm-up cell does not say so: %q", n)
	}
	conn, err := pgx.Connect(ctx, cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, left, err := leftovers(ctx, &Options{RunID: id, Output: Output{NoWrite: true}}, conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range left {
		defer inbox.DropSchema(context.Background(), conn, s)
	}
	want := []string{broken.Rounds[0].Schema, broken.Rounds[1].Schema}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("schemas left by the run: %v, want the failed rounds' %v", left, want)
	}
}
