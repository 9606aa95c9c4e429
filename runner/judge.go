package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// Anomaly names: the checker's vocabulary, as Elle's :lost or :duplicated.
// They are contracts of result.json, conform.json, the reports and `bench
// compare` (docs/results.md).
const (
	LostEffect         = "lost-effect"          // a published event never took effect
	DuplicateEffect    = "duplicate-effect"     // an event took effect twice
	VersionGap         = "version-gap"          // an increment applied while its predecessor was missing
	StaleApplied       = "stale-applied"        // an older version applied over a newer one
	InboxWithoutEffect = "inbox-without-effect" // the split bug: dedup row, no business change
	EffectWithoutInbox = "effect-without-inbox" // a business change with no dedup row
	ParkedStuck        = "parked-stuck"         // held for a predecessor past the end of the run
	ConflictAccepted   = "conflict-accepted"    // idempotency key reused with another payload and accepted
	// The external side (judgeexternal.go), from the external service's
	// call log.
	ExternalDuplicate     = "external-duplicate"      // an event's request applied more than once at the service
	ExternalLost          = "external-lost"           // an event took effect in the database, and the service applied no request for it
	ExternalWithoutEffect = "external-without-effect" // a request applied for an event that never took effect in the database
	ProcessingStuck       = "processing-stuck"        // an external operation left in flight: PROCESSING, STUCK, or an outbox row never sent
	KeyConflictAccepted   = "key-conflict-accepted"   // the service applied, or answered with a stored result, a different request under one key
)

// AnomalyNames lists every anomaly in report order (DedupMiss comes from
// the deliveries' decisions, decisions.go; the others from the tables and
// the external service's call log).
var AnomalyNames = []string{LostEffect, DuplicateEffect, VersionGap, StaleApplied, InboxWithoutEffect,
	EffectWithoutInbox, ParkedStuck, ConflictAccepted, DedupMiss,
	ExternalDuplicate, ExternalLost, ExternalWithoutEffect, ProcessingStuck, KeyConflictAccepted}

// maxExamples bounds the concrete examples kept per anomaly.
const maxExamples = 5

// Tables names what Check reads: an inbox schema, the consumer whose
// inbox rows count, and whether the schema keeps the checker's audit log.
type Tables struct {
	Schema, Consumer string
	Audited          bool
}

// Check reads the tables' snapshot and judges it against the plan: Judge
// with the database read first.
func Check(ctx context.Context, db inbox.DB, at Tables, plan *workload.Plan) (results.Invariants, int64, error) {
	snap, err := inbox.ReadSnapshot(ctx, db, at.Schema, at.Consumer, at.Audited)
	if err != nil {
		return results.Invariants{}, 0, err
	}
	inv, effects := Judge(plan, snap, at.Consumer)
	return inv, effects, nil
}

// Judge compares a snapshot of the inbox's tables with the plan's oracle
// and names every anomaly, with examples. It also returns the durable
// effects it found: events whose change is in the audit log (or, without
// audit, whose inbox row exists). It touches no database.
func Judge(plan *workload.Plan, snap *inbox.Snapshot, consumer string) (results.Invariants, int64) {
	j := &judgement{plan: plan, snap: snap, consumer: consumer, byVersion: indexByVersion(plan),
		applied: map[string]map[int64]int{}, superseded: map[string]bool{}, flagged: map[string]bool{},
		inv: results.Invariants{Anomalies: map[string]int64{}, Examples: map[string][]string{}}}
	for _, t := range snap.Transitions {
		j.transition(t)
	}
	effects := j.events()
	j.mustNotApply()
	j.finalState()
	j.unfinished()
	if snap.External != nil {
		j.external(snap.External)
	}
	j.inv.Verdict = results.VerdictPass
	for _, n := range j.inv.Anomalies {
		if n > 0 {
			j.inv.Verdict = results.VerdictFail
		}
	}
	return j.inv, effects
}

// judgement is one Judge call's working state.
type judgement struct {
	plan      *workload.Plan
	snap      *inbox.Snapshot
	consumer  string
	byVersion map[string]map[int64]*envelope.Event
	// applied[agg][version] counts the changes that applied that version
	// (a batch may apply consecutive versions in one row update);
	// superseded marks increments whose effect an applied snapshot carries.
	applied    map[string]map[int64]int
	superseded map[string]bool
	flagged    map[string]bool // aggregates with a per-event anomaly
	inv        results.Invariants
}

func indexByVersion(plan *workload.Plan) map[string]map[int64]*envelope.Event {
	out := make(map[string]map[int64]*envelope.Event, len(plan.Expected))
	for _, e := range plan.Events {
		m := out[e.Subject]
		if m == nil {
			m = map[int64]*envelope.Event{}
			out[e.Subject] = m
		}
		m[e.AggregateVersion] = e
	}
	return out
}

func (j *judgement) add(name, agg, example string) {
	j.inv.Anomalies[name]++
	if len(j.inv.Examples[name]) < maxExamples {
		j.inv.Examples[name] = append(j.inv.Examples[name], example)
	}
	if agg != "" {
		j.flagged[agg] = true
	}
}

// transition judges one audited change of an account.
func (j *judgement) transition(t inbox.Transition) {
	agg := t.Aggregate
	m := j.applied[agg]
	if m == nil {
		m = map[int64]int{}
		j.applied[agg] = m
	}
	e := j.byVersion[agg][t.NewVersion]
	switch {
	case e == nil:
		j.add(StaleApplied, agg, fmt.Sprintf("%s: changed v%d→v%d, a version no event carries", agg, t.OldVersion, t.NewVersion))
		return
	case t.NewVersion <= t.OldVersion:
		if m[t.NewVersion] > 0 && e.Kind == envelope.Increment {
			j.add(DuplicateEffect, agg, fmt.Sprintf("%s (%s v%d, +%d) took effect again at v%d", e.ID, agg, t.NewVersion, e.Amount, t.OldVersion))
		} else {
			j.add(StaleApplied, agg, fmt.Sprintf("%s: v%d applied over v%d", e.ID, t.NewVersion, t.OldVersion))
		}
		m[t.NewVersion]++
		return
	}
	covered, whole := j.replay(t)
	if !whole && e.Kind == envelope.Increment {
		j.brokenIncrement(t, e)
	}
	for _, v := range covered {
		ev := j.byVersion[agg][v]
		m[v]++
		if m[v] > 1 && ev.Kind == envelope.Increment {
			j.add(DuplicateEffect, agg, fmt.Sprintf("%s (%s v%d, +%d) took effect %d times", ev.ID, agg, v, ev.Amount, m[v]))
		}
		if !j.inboxed(ev.Key()) {
			j.add(EffectWithoutInbox, agg, fmt.Sprintf("%s changed %s to v%d but has no inbox row for consumer %s", ev.ID, agg, v, j.consumer))
		}
	}
}

// inboxed reports whether event k has its inbox row, taken as given for
// a consumer whose dedup records cannot be read (a service without an
// inbox query): the rules that need them do not apply to it.
func (j *judgement) inboxed(k string) bool { return j.snap.NoInbox || j.snap.Inbox[k] }

// replay walks the versions a change covers (a batch may apply v4..v9 in
// one update, a snapshot may jump over increments). When the replayed
// balance matches, the change is whole: it returns the versions whose
// effect it carries and marks the increments a snapshot overtook as
// superseded. Otherwise only the new version is covered.
func (j *judgement) replay(t inbox.Transition) (covered []int64, whole bool) {
	events := j.byVersion[t.Aggregate]
	b, lastSnap := t.OldBalance, t.OldVersion
	for v := t.OldVersion + 1; v <= t.NewVersion; v++ {
		ev := events[v]
		if ev == nil {
			return []int64{t.NewVersion}, false
		}
		if ev.Kind == envelope.Snapshot {
			b, lastSnap = ev.Amount, v
		} else {
			b += ev.Amount
		}
	}
	if b != t.NewBalance {
		return []int64{t.NewVersion}, false
	}
	for v := t.OldVersion + 1; v <= t.NewVersion; v++ {
		// Before the newest snapshot the change carries, an increment
		// either applied in the same change (a batch: it has its inbox
		// row) or was overtaken by the snapshot and never applied.
		if v < lastSnap && !j.inboxed(events[v].Key()) {
			j.superseded[events[v].Key()] = true
			continue
		}
		covered = append(covered, v)
	}
	return covered, true
}

// brokenIncrement names what an increment's change that does not replay
// did: jumped a version, added too much, or too little.
func (j *judgement) brokenIncrement(t inbox.Transition, e *envelope.Event) {
	agg := t.Aggregate
	switch grew := t.NewBalance - t.OldBalance; {
	case t.OldVersion < t.NewVersion-1:
		j.add(VersionGap, agg, fmt.Sprintf("%s: increment v%d applied at v%d (v%d missing)", e.ID, t.NewVersion, t.OldVersion, t.OldVersion+1))
	case grew > e.Amount:
		j.add(DuplicateEffect, agg, fmt.Sprintf("%s (%s v%d): balance grew by %d for an increment of %d", e.ID, agg, t.NewVersion, grew, e.Amount))
	default:
		j.add(LostEffect, agg, fmt.Sprintf("%s (%s v%d): balance grew by %d for an increment of %d", e.ID, agg, t.NewVersion, grew, e.Amount))
	}
}

// events checks that every planned event took effect (or was superseded
// by a snapshot), is not stuck parked, and has no inbox row without its
// change; it returns the durable effects.
func (j *judgement) events() (effects int64) {
	for _, e := range j.plan.Events {
		k := e.Key()
		if j.snap.Parked[k] {
			j.add(ParkedStuck, e.Subject, fmt.Sprintf("%s (%s v%d) still parked at the end of the run", e.ID, e.Subject, e.AggregateVersion))
			continue
		}
		if !j.snap.Audited {
			if j.snap.Inbox[k] {
				effects++
			} else if j.snap.Accounts[e.Subject].Version < e.AggregateVersion {
				j.add(LostEffect, e.Subject, fmt.Sprintf("%s (%s v%d) never took effect", e.ID, e.Subject, e.AggregateVersion))
			}
			continue
		}
		took := j.applied[e.Subject][e.AggregateVersion] > 0
		if took {
			effects++
		}
		switch {
		case took || j.superseded[k]:
		case j.snap.Inbox[k]:
			j.add(InboxWithoutEffect, e.Subject, fmt.Sprintf("%s (%s v%d) has an inbox row for %s but never changed the account", e.ID, e.Subject, e.AggregateVersion, j.consumer))
		default:
			j.add(LostEffect, e.Subject, fmt.Sprintf("%s (%s v%d, +%d) never took effect", e.ID, e.Subject, e.AggregateVersion, e.Amount))
		}
	}
	return effects
}

// mustNotApply: replays under a new event id and requests reusing an
// idempotency key with other content must have had no effect at all.
func (j *judgement) mustNotApply() {
	for _, e := range j.plan.MustNotApply {
		if j.snap.Inbox[e.Key()] {
			j.add(ConflictAccepted, e.Subject, fmt.Sprintf("%s (key %s/%s/%s, amount %d) was accepted: it has an inbox row", e.ID, e.Tenant, e.Operation, e.IdempotencyKey, e.Amount))
		} else if st, ok := j.snap.Accounts[e.Subject]; ok && j.plan.Expected[e.Subject] == (workload.State{}) && (st.Version != 0 || st.Balance != 0) {
			j.add(ConflictAccepted, "", fmt.Sprintf("%s (key %s/%s/%s) changed %s to balance %d", e.ID, e.Tenant, e.Operation, e.IdempotencyKey, e.Subject, st.Balance))
		}
	}
}

// finalState compares each aggregate with the oracle; reported only where
// no per-event anomaly already explains the aggregate, so one mistake
// counts once.
func (j *judgement) finalState() {
	for _, a := range slices.Sorted(maps.Keys(j.plan.Expected)) {
		want := j.plan.Expected[a]
		st := j.snap.Accounts[a]
		got := workload.State{Balance: st.Balance, Version: st.Version}
		if want == got || j.flagged[a] {
			continue
		}
		ex := fmt.Sprintf("%s: balance %d version %d, expected balance %d version %d", a, got.Balance, got.Version, want.Balance, want.Version)
		switch {
		case got.Version < want.Version || got.Balance < want.Balance:
			j.add(LostEffect, "", ex)
		case got.Version > want.Version:
			j.add(VersionGap, "", ex)
		default:
			j.add(DuplicateEffect, "", ex)
		}
	}
}
