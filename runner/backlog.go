package runner

import (
	"time"

	"github.com/inboxbench/inboxbench/workload"
)

// A saturated steady cell publishes as fast as the broker confirms, held
// back only by a bound on the messages sent and not yet answered by its
// consumers; when its window is up it stops publishing and drains what
// is left, which the figures never use. Under the workload's bound alone
// (max_backlog, by default 8 batches per shard: 32,000 messages for the
// default workload) a strategy applying 1,100 events/s measured 8 s and
// then drained for 25–30 s (issue 42). So, unless the workload sets
// max_backlog, the bound follows the cell's own consumption: backlogSpan
// of it, re-measured over each span of the warm-up and fixed when the
// window starts, so that the drain takes about backlogSpan and the
// consumers still never wait for work (a publisher pause shorter than
// backlogSpan leaves them a backlog). It starts at its floor, two batches
// per consumer, so that a slow cell builds nothing while its rate is not
// known yet, and grows with the rate: a bound that held the consumers
// back is lifted at the next span by backlogSpan over the time a message
// takes through the broker, well above one.

// backlogSpan is how many seconds of its consumption a saturated steady
// cell may have sent and not yet consumed.
const backlogSpan = 2500 * time.Millisecond

// backlogFloor is the least bound: two batches per consumer (at most the
// workload's bound).
func backlogFloor(spec *workload.Spec) int64 {
	return min(int64(2*max(spec.Consumers, 1)*max(spec.BatchSize, 64)), int64(spec.Backlog()))
}

// backlogBound is the bound of a cell consuming rate events/s: backlogSpan
// of it, at least backlogFloor, at most the workload's bound.
func backlogBound(spec *workload.Spec, rate float64) int64 {
	b := int64(rate * backlogSpan.Seconds())
	return min(max(b, backlogFloor(spec)), int64(spec.Backlog()))
}

// pacesBacklog reports whether a cell's backlog bound follows its
// consumption: a saturated steady cell whose workload sets no
// max_backlog of its own.
func pacesBacklog(spec *workload.Spec, steady bool) bool {
	return steady && spec.PublishRate == 0 && spec.MaxBacklog == 0
}
