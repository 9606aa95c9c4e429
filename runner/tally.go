package runner

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// tally is what one process counts of a cell: counters, histograms, the
// messages answered for good and the window in which effects committed.
// The handler writes it; the waiter, the progress line and the result
// read it. In a `bench worker` process it is that worker's share, which
// it reports; the coordinator's tally is then the sum of the reports.
type tally struct {
	c      counters
	meters *meters
	// handled counts distinct messages answered with Ack or Reject
	// (final); done remembers which, so redeliveries are not counted twice.
	// A plain map under a lock taken once per handler call: a sync.Map
	// cost about a microsecond per message, on the cores the database
	// being measured uses.
	handled atomic.Int64
	doneMu  sync.Mutex
	done    map[string]struct{}
	// settled bumps whenever a message is answered for good (or a worker
	// reports having answered some): the stall timer watches it.
	settled atomic.Int64
	// warmEnd is when the warm-up ends (unix nanos); effectsAtWarm the
	// effects counted by then.
	warmEnd       atomic.Int64
	effectsAtWarm atomic.Int64
	// firstEffect/lastEffect bound the throughput window (unix nanos).
	firstEffect, lastEffect atomic.Int64
	// remoteP99 is the workers' recent e2e p99, for the progress line.
	remoteP99 atomic.Int64
	// policy decides and remembers failed events in this process;
	// remote holds what the workers reported of theirs.
	policy *ErrorPolicy
	remote atomic.Pointer[[]results.Failure]
	// decided remembers which events took effect, to see the deliveries
	// the inbox did not recognise afterwards (dedup-miss); remoteMisses
	// are what the workers reported of theirs.
	decided       *decisions
	remoteMisses  atomic.Int64
	remoteExample atomic.Pointer[[]string]
}

// newTally sizes its per-message maps for about expected messages, so that
// they grow before the stream rather than while it is measured.
func newTally(measure bool, bound RetryBound, expected int) *tally {
	return &tally{meters: newMeters(measure), policy: NewErrorPolicy(bound), decided: newDecisions(expected), done: make(map[string]struct{}, expected)}
}

// dedupMisses are this process's and the workers' dedup misses.
func (t *tally) dedupMisses() (int64, []string) {
	n, ex := t.decided.report()
	if r := t.remoteExample.Load(); r != nil {
		ex = append(ex, *r...)
	}
	return n + t.remoteMisses.Load(), ex
}

// failures are the first failure of each kind, in this process and
// reported by workers.
func (t *tally) failures() []results.Failure {
	fs := t.policy.Failures()
	if r := t.remote.Load(); r != nil {
		fs = mergeFailures(fs, append([]results.Failure(nil), *r...))
	}
	return fs
}

// countAll counts a batch's outcomes, then what their commits drained:
// an event parked and drained by the same batch was parked first. The
// batch's effects all carry the time it was counted.
func (t *tally) countAll(outs []inbox.Outcome) {
	var drained []inbox.Outcome
	var effects int64
	for _, o := range outs {
		drained = append(drained, o.Drained...)
		o.Drained = nil
		effects += t.countOne(o)
	}
	t.effects(effects)
	if len(drained) > 0 {
		t.countAll(drained)
	}
}

// count updates counters for one outcome (and what its commit drained).
func (t *tally) count(out inbox.Outcome) { t.effects(t.countOne(out)) }

// effects counts n effects at once: the counter and the window's bounds
// are shared by every consumer, so a batch touches them once.
func (t *tally) effects(n int64) {
	if n == 0 {
		return
	}
	now := time.Now().UnixNano()
	t.c.effects.Add(n)
	if t.firstEffect.Load() == 0 {
		t.firstEffect.CompareAndSwap(0, now)
	}
	t.lastEffect.Store(now)
}

// effectsAt counts n effects that committed from first to last: a cell
// observed from outside (a service under test) learns its effects, and
// their commit times, from the WAL after the fact.
func (t *tally) effectsAt(n int64, first, last time.Time) {
	if n == 0 {
		return
	}
	t.c.effects.Add(n)
	t.firstEffect.CompareAndSwap(0, first.UnixNano())
	if l := last.UnixNano(); l > t.lastEffect.Load() {
		t.lastEffect.Store(l)
	}
	t.handled.Add(n)
	t.settled.Add(n)
}

// countOne counts one outcome and what its commit drained, except their
// effects, which it returns.
func (t *tally) countOne(out inbox.Outcome) (effects int64) {
	t.decided.record(out)
	switch out.Result {
	case inbox.Applied:
		effects++
	case inbox.Duplicate:
		t.c.duplicates.Add(1)
	case inbox.Gap:
		t.c.gaps.Add(1)
	case inbox.Parked:
		t.c.parked.Add(1)
	case inbox.Stale:
		t.c.stale.Add(1)
	case inbox.Conflict:
		t.c.conflicts.Add(1)
	}
	if out.Attempts > 1 {
		t.c.retries.Add(int64(out.Attempts - 1))
	}
	if out.Err != nil {
		t.c.errors.Add(1)
	}
	for _, d := range out.Drained {
		effects += t.countOne(d)
	}
	return effects
}

// forget drops a judged rate-search step's messages from done and its
// events from decided: they are not delivered again, and a search answers
// millions of messages, which kept for the whole search grew the
// harness's heap by gigabytes and slowed its later steps (garbage
// collection on the cores being measured).
func (t *tally) forget(plan *workload.Plan) {
	t.decided.forget(plan)
	t.doneMu.Lock()
	defer t.doneMu.Unlock()
	for _, p := range plan.Publishes {
		delete(t.done, eventMessageID(p.Event))
	}
}

// answerAll records the messages ids answered for good and calls first
// (when not nil) for each answered for the first time in this process;
// it returns how many were.
func (t *tally) answerAll(ids []string, first func(id string)) int {
	var fresh []string
	t.doneMu.Lock()
	for _, id := range ids {
		n := len(t.done)
		t.done[id] = struct{}{} // one map operation: a new id grows the map
		if len(t.done) > n {
			fresh = append(fresh, id)
		}
	}
	t.doneMu.Unlock()
	if len(fresh) > 0 {
		t.handled.Add(int64(len(fresh)))
		t.settled.Add(int64(len(fresh)))
	}
	if first != nil {
		for _, id := range fresh {
			first(id)
		}
	}
	return len(fresh)
}

// messageID names a delivered message for counting answers: its event
// identity and attempt (a republish is a second message of the same
// event), or its transport message id when it is not an event (poison).
func messageID(d *brokers.Delivery, ev *envelope.Event) string {
	if ev == nil {
		return "poison " + d.ID
	}
	return eventMessageID(ev)
}

// eventMessageID is the id of the message that carries ev: its key and
// its attempt (ev.Key() + "#…", built at once). The handler answers and
// the tally forgets by it.
func eventMessageID(ev *envelope.Event) string {
	return ev.Source + " " + ev.ID + "#" + strconv.Itoa(ev.Attempt)
}

// warm marks the end of the warm-up at t0 and snapshots the effects then.
func (t *tally) startWarmup(at time.Time, warmup time.Duration) (stop func() bool) {
	t.warmEnd.Store(at.Add(warmup).UnixNano())
	timer := time.AfterFunc(warmup, func() { t.effectsAtWarm.Store(t.c.effects.Load()) })
	return timer.Stop
}

// notes are what happened to a cell besides its figures, each text once.
type notes struct {
	mu   sync.Mutex
	list []string
}

func (n *notes) add(text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.list {
		if s == text {
			return
		}
	}
	if len(n.list) < 50 {
		n.list = append(n.list, text)
	}
}

func (n *notes) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.list...)
}
