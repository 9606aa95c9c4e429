package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/workload"
)

// handler turns deliveries into inbox decisions and verdicts: decode,
// apply through the strategy, count the outcome, answer the broker only
// after the database decided. One handler serves every consumer of a cell
// in a process.
type handler struct {
	in       *inbox.Inbox
	strategy inbox.Strategy
	consumer string
	spec     *workload.Spec
	// ackFirst: the strategy is a consumer-level negative control that
	// acks before its commit (broken-ack-before-commit); settleEarly: it
	// is the transport's (EarlySettle), whose consumers subscribe with
	// SettleOnReceipt.
	ackFirst, settleEarly bool
	// backlogCrashes is the crash-with-backlog fault's count per cell
	// (Options.Stream.CrashWithBacklog); claimed counts those this
	// process knows to be claimed (dieWithBacklog).
	backlogCrashes int
	claimed        atomic.Int64
	t              *tally
	notes          *notes
	hooks          hooks
}

// hooks are what differs between a consumer inside `bench run` and one
// in a `bench worker` process.
type hooks interface {
	// firstCrash says whether an event's crash fault fires now: once per
	// event and cell, across processes.
	firstCrash(ctx context.Context, key string) bool
	// answered is told of each message answered for good in this process,
	// before the driver acks it.
	answered(id string)
	// crash is a crash fault: after the commit, before the ack, or
	// before the commit with a backlog. A worker process kills itself
	// there and never returns; in process it returns and the verdicts tear
	// the subscription down.
	crash(ctx context.Context)
}

// newHandler is the handler of the cell's consumers in this process:
// they apply through its inbox and strategy, and count in its tally.
func newHandler(c *cell, h hooks) *handler {
	hd := &handler{in: c.in, strategy: c.strategy, consumer: c.consumer, spec: c.o.Spec, t: c.t, notes: c.notes, hooks: h,
		backlogCrashes: c.o.Stream.CrashWithBacklog}
	if a, ok := c.strategy.(inbox.AckOrdering); ok {
		hd.ackFirst = a.AckBeforeCommit()
	}
	_, hd.settleEarly = c.strategy.(earlySettle)
	return hd
}

// subscribeOptions are what the cell's consumers subscribe with.
func (h *handler) subscribeOptions() brokers.SubscribeOptions {
	return brokers.SubscribeOptions{MaxBatch: h.batchSize(), SettleOnReceipt: h.settleEarly}
}

// batchSize is the most deliveries one handler call takes: the workload's
// batch size for strategies that apply batches, else one.
func (h *handler) batchSize() int {
	if b, ok := h.strategy.(inbox.Batching); ok && b.PrefersBatches() {
		return h.spec.BatchSize
	}
	return 1
}

// batch is one handler call's deliveries as they are decided.
type batch struct {
	ds       []*brokers.Delivery
	verdicts []brokers.Verdict
	ids      []string          // messageID of each delivery
	evs      []*envelope.Event // the events decoded, in order
	idx      []int             // evs[j] is delivery idx[j]
	// received is when the call began, decided when the inbox decided.
	received, decided time.Time
}

// within is the brokers.Handler of a consumer's subscription v.
func (h *handler) within(v *subView) brokers.Handler {
	return func(ctx context.Context, ds []*brokers.Delivery) []brokers.Verdict { return h.handle(ctx, ds, v) }
}

// handle handles one call of subscription v.
func (h *handler) handle(ctx context.Context, ds []*brokers.Delivery, v *subView) []brokers.Verdict {
	if h.backlogCrashes > 0 && v.dying.Load() {
		return h.dead(ctx, ds, v)
	}
	b := &batch{ds: ds, received: time.Now(), verdicts: make([]brokers.Verdict, len(ds)), ids: make([]string, len(ds)),
		evs: make([]*envelope.Event, 0, len(ds)), idx: make([]int, 0, len(ds))}
	crash := h.decode(ctx, b)
	switch {
	case h.backlogCrashes > 0 && h.dieWithBacklog(ctx, len(ds), v):
		return h.die(ctx, b, v)
	case h.backlogCrashes > 0 && v.dying.Load():
		return h.dead(ctx, ds, v) // another call claimed the death meanwhile
	case len(b.evs) > 0 && h.ackFirst && crash:
		return h.ackUncommitted(b)
	case len(b.evs) > 0:
		// The crash fault between an external call and its commit
		// (extCaller.afterCall) ends the batch like a dead consumer.
		crash = h.apply(ctx, b) || crash
	}
	if crash {
		h.hooks.crash(ctx) // a worker process: a real kill -9, no return
		// Committed, then "died" before the ack: nothing of this batch is
		// acknowledged; the broker redelivers it.
		crashAll(b.verdicts)
	}
	h.record(b.ids, b.verdicts)
	return b.verdicts
}

// ackUncommitted is the negative control that acks first: the crash
// lands between the ack and the commit, and the events are gone.
func (h *handler) ackUncommitted(b *batch) []brokers.Verdict {
	for _, i := range b.idx {
		b.verdicts[i] = brokers.Ack
	}
	h.record(b.ids, b.verdicts)
	return b.verdicts
}

// die ends a call whose consumer dies with the batch in its hands
// (dieWithBacklog): nothing committed, nothing acknowledged — a worker
// process is killed here — and, in process, the consumer's other calls
// (dead) end with it. The negative control that acks first acks the
// batch instead, uncommitted, and its consumer lives on, as with the
// crash after a commit: its acks must reach the broker to lose anything.
func (h *handler) die(ctx context.Context, b *batch, v *subView) []brokers.Verdict {
	defer close(v.died)
	if len(b.evs) > 0 && h.ackFirst {
		v.dying.Store(false)
		return h.ackUncommitted(b)
	}
	h.hooks.crash(ctx) // a worker process: a real kill -9, no return
	crashAll(b.verdicts)
	h.record(b.ids, b.verdicts)
	return b.verdicts
}

func crashAll(vs []brokers.Verdict) {
	for i := range vs {
		vs[i] = brokers.Crash
	}
}

// backlogKey names crash k of the crash-with-backlog fault, as its claim
// (hooks.firstCrash) has it.
func backlogKey(k int64) string { return fmt.Sprintf("crash-with-backlog#%d", k+1) }

// dieWithBacklog is the crash-with-backlog fault: while one of the cell's
// crashes is unclaimed, a call of a subscription not dying already claims
// it (once per cell, across processes), holds its batch of n unhandled
// until the subscription holds a backlog beyond it
// (brokers.HoldForBacklog), notes what it held, and reports true: the
// consumer is to die now, before its commit. From the claim on, its
// consumer handles nothing more (dead): its other shards do not drain
// what it holds while it waits.
func (h *handler) dieWithBacklog(ctx context.Context, n int, v *subView) bool {
	if h.claimed.Load() >= int64(h.backlogCrashes) {
		return false
	}
	var k int64
	if !v.claim(func() (ok bool) { k, ok = h.claimBacklogCrash(ctx); return ok }) {
		return false
	}
	b := brokers.HoldForBacklog(ctx, v.stats, n, v.opts)
	note := fmt.Sprintf("crash with a backlog %d of %d: a consumer died holding %d deliveries it had received and not settled, %d of them in its handler",
		k+1, h.backlogCrashes, b.Held, b.Batch)
	if !b.Reached {
		note += fmt.Sprintf(" (%s: it waited for %d, which never came)", BacklogNotReached, b.Want)
	}
	h.notes.add(note)
	return true
}

// dead is a call of a consumer that is dying: it handles nothing, waits
// until the consumer died (a worker process never returns from there) and
// settles nothing — or, when the consumer lived on, is handled as usual.
func (h *handler) dead(ctx context.Context, ds []*brokers.Delivery, v *subView) []brokers.Verdict {
	<-v.died
	if !v.dying.Load() {
		return h.handle(ctx, ds, v)
	}
	vs := make([]brokers.Verdict, len(ds))
	crashAll(vs)
	return vs
}

// BacklogNotReached is in the note of a crash with a backlog that did
// not build: the scenario that asked for it proved less than it says.
const BacklogNotReached = "backlog not reached"

// claimBacklogCrash claims the first of the cell's crashes with a backlog
// no process claimed yet and says which (0-based); false when every one
// is. The claim outlives the handler's ctx, which a revoked shard ends: a
// claim recorded while its caller gave up would be a crash nobody dies.
func (h *handler) claimBacklogCrash(ctx context.Context) (int64, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for k := h.claimed.Load(); k < int64(h.backlogCrashes); k++ {
		if h.hooks.firstCrash(ctx, backlogKey(k)) {
			for c := h.claimed.Load(); c < k+1 && !h.claimed.CompareAndSwap(c, k+1); c = h.claimed.Load() {
			}
			return k, true
		}
	}
	h.claimed.Store(int64(h.backlogCrashes))
	return 0, false
}

// decode decodes the batch's events and rejects its poison; crash
// reports an event whose crash fault fires now.
func (h *handler) decode(ctx context.Context, b *batch) (crash bool) {
	var redelivered int64
	for i, d := range b.ds {
		if d.Redelivered || d.DeliveryCount > 1 || d.Attempt > 1 {
			redelivered++
		}
		// The inbox never reads the payload: checked, not copied.
		ev, err := envelope.UnmarshalSkipData(d.Body)
		if err != nil {
			// Poison: dead-lettered by the driver and counted, never
			// silently acked.
			h.t.c.rejected.Add(1)
			b.verdicts[i], b.ids[i] = brokers.Reject, messageID(d, nil)
			continue
		}
		if h.spec.CrashAfterCommit(ev) && h.hooks.firstCrash(ctx, ev.Key()) {
			crash = true
		}
		b.ids[i] = messageID(d, ev)
		b.evs = append(b.evs, ev)
		b.idx = append(b.idx, i)
	}
	// Shared counters: touched once per call, not once per message.
	h.t.c.deliveries.Add(int64(len(b.ds)))
	h.t.c.redeliveries.Add(redelivered)
	return crash
}

// apply runs the strategy on the decoded events (racing the storm's extra
// appliers) and fills their verdicts; died reports the handler dying
// between an external call and its commit (the verdicts are then Crash).
func (h *handler) apply(ctx context.Context, b *batch) (died bool) {
	evs := b.evs
	h.t.c.executions.Add(int64(len(evs)))
	release, wait := h.storms(ctx, evs)
	release()
	outs, _ := h.strategy.ApplyBatch(ctx, h.in, h.consumer, evs)
	wait()
	b.decided = time.Now()
	m := h.t.meters.get(b.ds[0].Shard)
	h.t.countAll(outs)
	for j, out := range outs {
		id := b.ids[b.idx[j]]
		v := h.account(m, evs[j], out, b)
		switch {
		case errors.Is(out.Err, errDiedAfterCall):
			died = true
		case out.Err != nil:
			v = h.failed(ctx, id, evs[j], inbox.Describe(out.Err))
		case out.Result == inbox.Gap:
			v = h.failed(ctx, id, evs[j], gapFailure(evs[j], out))
		default:
			h.t.policy.Succeeded(id)
		}
		b.verdicts[b.idx[j]] = v
	}
	return died
}

// failed asks the error policy what to answer for an event that was not
// decided: send it back, or dead-letter it. Never ack an event without a
// decision.
func (h *handler) failed(ctx context.Context, id string, ev *envelope.Event, f inbox.Failure) brokers.Verdict {
	v := h.t.policy.Verdict(ctx, id, ev, f)
	if v == brokers.Reject {
		h.t.c.failed.Add(1)
	}
	return v
}

// gapFailure describes a version-ahead event that was not parked (parking
// off, or its bound full): retried while its predecessor may still come.
func gapFailure(ev *envelope.Event, out inbox.Outcome) inbox.Failure {
	why := "parking is off"
	if out.ParkOverflow {
		why = "the aggregate's parking bound is full"
	}
	return inbox.Failure{Kind: "version_gap", Retryable: true,
		Message: fmt.Sprintf("%s v%d arrived before v%d and was not parked (%s); its predecessor did not come within the retry bound", ev.Subject, ev.AggregateVersion, ev.AggregateVersion-1, why)}
}

// storms prepares StormConsumers-1 extra appliers for each storm-marked
// event, each on its own connection, that race the regular apply once
// released: exactly one of all of them may win the inbox key.
func (h *handler) storms(ctx context.Context, evs []*envelope.Event) (release, wait func()) {
	if h.spec.Faults.ConcurrentDuplicates == 0 {
		return func() {}, func() {} // the common case costs the hot path nothing
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for _, ev := range evs {
		if !h.spec.Storm(ev) {
			continue
		}
		for range h.spec.Faults.StormConsumers - 1 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				h.t.c.executions.Add(1)
				out, _ := h.in.Apply(ctx, h.strategy, h.consumer, ev)
				h.t.count(out)
			}()
		}
	}
	return func() { close(gate) }, wg.Wait
}

// account records an outcome's latencies (from when b was received and
// decided) and picks the verdict.
func (h *handler) account(m *meter, ev *envelope.Event, out inbox.Outcome, b *batch) brokers.Verdict {
	received, decided := b.received, b.decided
	// Warm-up excludes what was both sent and decided during it. A
	// backlog built up during warm-up still counts when it commits later:
	// its latency from the intended send time is what an overloaded
	// consumer really costs.
	measured := !ev.IntendedAt.IsZero() && decided.UnixNano() >= h.t.warmEnd.Load()
	var e2e, dedup time.Duration
	switch out.Result {
	case inbox.Applied:
		if measured {
			e2e = decided.Sub(ev.IntendedAt)
		}
	case inbox.Duplicate:
		dedup = decided.Sub(received)
	}
	if out.Result != inbox.NoResult {
		m.record(out.Result.String(), e2e, out.Duration, dedup)
	}
	switch {
	case out.Err != nil, out.Result == inbox.Gap:
		// Not decided, or the predecessor must come first (parking is
		// off or full): the caller asks the error policy.
		return brokers.Retry
	default:
		// APPLIED, DUPLICATE, PARKED (durably held), STALE and CONFLICT
		// (decided and counted: redelivery cannot change them).
		return brokers.Ack
	}
}

// record counts the messages that reached a final verdict, once each.
func (h *handler) record(ids []string, vs []brokers.Verdict) {
	final := make([]string, 0, len(vs))
	for i, v := range vs {
		if v == brokers.Ack || v == brokers.Reject {
			final = append(final, ids[i])
		}
	}
	h.t.answerAll(final, h.hooks.answered)
}

// inProcess are the hooks of consumers inside `bench run`.
type inProcess struct {
	// crashed remembers events whose crash fault already fired, so a
	// redelivery is not crashed again (Kafka has no redelivered flag).
	crashed sync.Map
}

func (p *inProcess) firstCrash(_ context.Context, key string) bool {
	_, done := p.crashed.LoadOrStore(key, true)
	return !done
}

func (*inProcess) answered(string)       {}
func (*inProcess) crash(context.Context) {}
