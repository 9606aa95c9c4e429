package runner

import (
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/workload"
)

// defaultShape is the default workload's shape as far as the backlog
// bound goes: 4 consumers, batches of 500, 8 shards (workload bound
// 32,000).
func defaultShape() *workload.Spec {
	return &workload.Spec{Consumers: 4, BatchSize: 500, Shards: 8}
}

// TestBacklogBound: 2.5 s of the cell's consumption, at least two batches
// per consumer, at most the workload's bound: the cell applying
// 1,100 events/s drains 4,000 messages (3.6 s) instead of 32,000 (29 s);
// a cell as fast as the database alone keeps the workload's bound.
func TestBacklogBound(t *testing.T) {
	spec := defaultShape()
	if got := spec.Backlog(); got != 32000 {
		t.Fatalf("workload bound %d, want 32000", got)
	}
	for _, tc := range []struct {
		rate float64
		want int64
	}{{0, 4000}, {1100, 4000}, {8000, 20000}, {12800, 32000}, {30000, 32000}} {
		got := backlogBound(spec, tc.rate)
		if got != tc.want {
			t.Errorf("rate %.0f: bound %d, want %d", tc.rate, got, tc.want)
		}
		if drain := time.Duration(float64(got) / max(tc.rate, 1) * float64(time.Second)); tc.rate >= 1100 && drain > 4*time.Second {
			t.Errorf("rate %.0f: bound %d drains in %s", tc.rate, got, drain)
		}
	}
	tiny := &workload.Spec{Consumers: 8, BatchSize: 500, Shards: 1, MaxBacklog: 0}
	if f, w := backlogFloor(tiny), int64(tiny.Backlog()); f > w {
		t.Errorf("floor %d above the workload's bound %d", f, w)
	}
}

// TestBacklogBoundLiftsItself: a bound that holds the consumers back is
// lifted span by span. The cell below consumes what the bound lets
// through a pipeline whose messages take a whole second (rate = bound /
// 1 s), up to its capacity of 9,000 events/s: held at 4,000 events/s by
// the floor in the first span, it reaches its capacity in the second,
// and stays.
func TestBacklogBoundLiftsItself(t *testing.T) {
	spec := defaultShape()
	bound, rate := backlogFloor(spec), 0.0
	for span := 1; span <= 3; span++ {
		rate = min(9000, float64(bound)/1.0)
		if span == 1 && rate != 4000 {
			t.Fatalf("first span: %.0f events/s, want 4,000 (the floor's)", rate)
		}
		bound = backlogBound(spec, rate)
	}
	if rate != 9000 || bound != 22500 {
		t.Errorf("after three spans: %.0f events/s under a bound of %d, want 9,000 and 22,500", rate, bound)
	}
}

// TestPacesBacklog: only a saturated steady cell whose workload leaves
// max_backlog to the suite.
func TestPacesBacklog(t *testing.T) {
	spec := defaultShape()
	if !pacesBacklog(spec, true) || pacesBacklog(spec, false) {
		t.Error("a saturated steady cell paces its backlog, a cell run for its events does not")
	}
	rated := *spec
	rated.PublishRate = 1000
	own := *spec
	own.MaxBacklog = 50000
	if pacesBacklog(&rated, true) || pacesBacklog(&own, true) {
		t.Error("a cell at a rate, or with the workload's own max_backlog, paces its backlog")
	}
}

// TestRecentRate: the rate over the last span, none before a span.
func TestRecentRate(t *testing.T) {
	ss := []sample{{0, 0}, {time.Second, 500}, {2 * time.Second, 2500}, {3 * time.Second, 4500}}
	if _, ok := recentRate(ss[:2], 2*time.Second); ok {
		t.Error("a rate before a span passed")
	}
	if r, ok := recentRate(ss, 2*time.Second); !ok || r != 2000 {
		t.Errorf("rate %v %v, want 2000 over the last 2 s", r, ok)
	}
}
