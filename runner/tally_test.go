package runner

import (
	"testing"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/workload"
)

// TestTallyForgetsAJudgedStep: a rate search's tally keeps no message of
// a step once it is judged, and a step's messages answered again after
// that are not mixed up with the next step's.
func TestTallyForgetsAJudgedStep(t *testing.T) {
	spec := workload.Defaults()
	spec.Events, spec.Aggregates = 200, 20
	plan := workload.Generate(&spec)
	tl := newTally(false, RetryBound{}, len(plan.Publishes))
	ids := make([]string, 0, len(plan.Publishes))
	distinct := map[string]bool{}
	for _, p := range plan.Publishes {
		id := messageID(&brokers.Delivery{}, p.Event) // as the handler names them
		ids, distinct[id] = append(ids, id), true
	}
	if n := tl.answerAll(ids, nil); n != len(distinct) {
		t.Fatalf("%d answered for the first time, want %d (one per message)", n, len(distinct))
	}
	tl.forget(plan)
	if len(tl.done) != 0 {
		t.Fatalf("%d message ids kept after the step was judged", len(tl.done))
	}
	if tl.handled.Load() != int64(len(distinct)) {
		t.Fatalf("handled %d, want %d: forgetting must not uncount", tl.handled.Load(), len(distinct))
	}
}
