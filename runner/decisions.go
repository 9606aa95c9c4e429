package runner

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// DedupMiss is the anomaly of an event (same consumer, source and id) that
// had taken effect and was then decided STALE, GAP or APPLIED again,
// where the inbox must say DUPLICATE. (PARKED is not one: a redelivery of
// a parked event is decided PARKED while a concurrent commit drains it,
// and the two are recorded in either order.) The final state can still be
// right — the version check stopped the change — but the inbox did not
// recognise the event, so every other side effect of the handler (an
// e-mail, an outbox message, a call) ran again. An inbox that forgets keys
// too early (a TTL-style dedup, retention shorter than redelivery) shows
// this way.
const DedupMiss = "dedup-miss"

// decisions records, per event, whether it took effect, and counts the
// decisions that missed it afterwards. The handler feeds it every
// outcome; sharded so the hot path takes an uncontended lock.
type decisions struct {
	seed   maphash.Seed
	shards [64]decisionShard
	misses atomic.Int64

	mu       sync.Mutex
	examples []string
}

type decisionShard struct {
	mu   sync.Mutex
	took map[eventKey]struct{}
}

// eventKey is an event's identity (source, id), kept as the two strings
// the event already holds: no key is built per decision.
type eventKey struct{ source, id string }

func (d *decisions) shard(k eventKey) *decisionShard {
	return &d.shards[maphash.String(d.seed, k.id)%uint64(len(d.shards))]
}

// newDecisions sizes the shards for about expected effects.
func newDecisions(expected int) *decisions {
	d := &decisions{seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i].took = make(map[eventKey]struct{}, expected/len(d.shards)*9/8)
	}
	return d
}

// record takes one decision (not the ones it drained: the tally passes
// those one by one).
func (d *decisions) record(o inbox.Outcome) {
	switch o.Result {
	case inbox.Applied, inbox.Stale, inbox.Gap:
	default:
		return
	}
	k := eventKey{o.Source, o.ID}
	sh := d.shard(k)
	sh.mu.Lock()
	var took bool
	if o.Result == inbox.Applied {
		// One map operation, not a lookup and an insert: the map holds
		// every applied event of the cell, and each visit is a cache miss.
		n := len(sh.took)
		sh.took[k] = struct{}{}
		took = len(sh.took) == n
	} else {
		_, took = sh.took[k]
	}
	sh.mu.Unlock()
	if !took {
		return
	}
	d.misses.Add(1)
	d.mu.Lock()
	if len(d.examples) < maxExamples {
		d.examples = append(d.examples, fmt.Sprintf("%s (%s v%d) took effect, then a delivery of it was decided %s: the inbox did not recognise it",
			o.ID, o.Subject, o.Version, o.Result))
	}
	d.mu.Unlock()
}

// forget drops what it recorded of plan's events (a rate search's step,
// judged and gone), so that a search holds one step's decisions at a
// time.
func (d *decisions) forget(plan *workload.Plan) {
	for _, e := range append(plan.Events[:len(plan.Events):len(plan.Events)], plan.MustNotApply...) {
		k := eventKey{e.Source, e.ID}
		sh := d.shard(k)
		sh.mu.Lock()
		delete(sh.took, k)
		sh.mu.Unlock()
	}
}

// report returns the misses and their examples.
func (d *decisions) report() (int64, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.misses.Load(), append([]string(nil), d.examples...)
}

// judgeDecisions adds what the deliveries' decisions show to a verdict:
// dedup-miss, with examples.
func judgeDecisions(inv *results.Invariants, misses int64, examples []string) {
	addAnomaly(inv, DedupMiss, misses, examples)
}

// addAnomaly adds n occurrences of an anomaly, and their examples (up to
// maxExamples in all), to a verdict, which then fails.
func addAnomaly(inv *results.Invariants, name string, n int64, examples []string) {
	if n == 0 {
		return
	}
	inv.Anomalies[name] += n
	ex := append(inv.Examples[name], examples...)
	inv.Examples[name] = ex[:min(len(ex), maxExamples)]
	if inv.Verdict == results.VerdictPass {
		inv.Verdict = results.VerdictFail
	}
}
