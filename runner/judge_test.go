package runner

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// The checker's rules, one table row each, judged from hand-made
// snapshots: no database, no broker (go test -run Judge ./runner passes
// with the stack down).

func ev(agg string, v, amount int64) *envelope.Event {
	return &envelope.Event{SpecVersion: envelope.SpecVersion, Source: "test", ID: fmt.Sprintf("%s-v%d", agg, v), Type: "t",
		Subject: agg, AggregateVersion: v, Kind: envelope.Increment, Amount: amount}
}

func snap(agg string, v int64) *envelope.Event {
	e := ev(agg, v, 0)
	e.Kind, e.ID = envelope.Snapshot, fmt.Sprintf("%s-snap-v%d", agg, v)
	return e
}

// plan of one aggregate "a": +10 (v1), +20 (v2), +30 (v3).
func judgePlan() *workload.Plan {
	evs := []*envelope.Event{ev("a", 1, 10), ev("a", 2, 20), ev("a", 3, 30)}
	return &workload.Plan{Events: evs, Expected: map[string]workload.State{"a": {Balance: 60, Version: 3}}}
}

// cleanSnap is the snapshot of a correct run of judgePlan: one change per
// version, an inbox row per event.
func cleanSnap(p *workload.Plan) *inbox.Snapshot {
	s := &inbox.Snapshot{Accounts: map[string]inbox.AccountState{}, Inbox: map[string]bool{}, Parked: map[string]bool{}, Audited: true}
	bal := map[string]int64{}
	for _, e := range p.Events {
		s.Transitions = append(s.Transitions, inbox.Transition{Aggregate: e.Subject, OldVersion: e.AggregateVersion - 1,
			NewVersion: e.AggregateVersion, OldBalance: bal[e.Subject], NewBalance: bal[e.Subject] + e.Amount})
		bal[e.Subject] += e.Amount
		s.Inbox[e.Key()] = true
		s.Accounts[e.Subject] = inbox.AccountState{Balance: bal[e.Subject], Version: e.AggregateVersion}
	}
	return s
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name string
		// edit turns the clean plan and snapshot into the case.
		edit func(p *workload.Plan, s *inbox.Snapshot)
		want map[string]int64 // anomalies; nil: PASS
		// effects counted as durable.
		effects int64
	}{
		{name: "clean run", edit: func(*workload.Plan, *inbox.Snapshot) {}, effects: 3},
		{name: "batch applies v1..v3 in one update", effects: 3, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions = []inbox.Transition{{Aggregate: "a", OldVersion: 0, NewVersion: 3, OldBalance: 0, NewBalance: 60}}
		}},
		{name: "a snapshot supersedes increments", effects: 2, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			sn := snap("a", 2)
			sn.Amount = 25
			p.Events[1] = sn
			p.Expected["a"] = workload.State{Balance: 55, Version: 3}
			// v3 arrives after the snapshot; v1 was overtaken by it.
			s.Transitions = []inbox.Transition{{Aggregate: "a", OldVersion: 0, NewVersion: 2, OldBalance: 0, NewBalance: 25},
				{Aggregate: "a", OldVersion: 2, NewVersion: 3, OldBalance: 25, NewBalance: 55}}
			s.Inbox = map[string]bool{sn.Key(): true, p.Events[2].Key(): true}
			s.Accounts["a"] = inbox.AccountState{Balance: 55, Version: 3}
		}},
		{name: "lost-effect: v3 never applied", want: map[string]int64{LostEffect: 1}, effects: 2, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions = s.Transitions[:2]
			delete(s.Inbox, p.Events[2].Key())
			s.Accounts["a"] = inbox.AccountState{Balance: 30, Version: 2}
		}},
		{name: "duplicate-effect: v2 applied again", want: map[string]int64{DuplicateEffect: 1}, effects: 3, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions = append(s.Transitions, inbox.Transition{Aggregate: "a", OldVersion: 3, NewVersion: 2, OldBalance: 60, NewBalance: 80})
			s.Accounts["a"] = inbox.AccountState{Balance: 80, Version: 2}
		}},
		{name: "duplicate-effect: an increment adds twice its amount", want: map[string]int64{DuplicateEffect: 1}, effects: 3, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions[1].NewBalance = 50
			s.Transitions[2].OldBalance, s.Transitions[2].NewBalance = 50, 80
			s.Accounts["a"] = inbox.AccountState{Balance: 80, Version: 3}
		}},
		{name: "version-gap: v3 applied on v1", want: map[string]int64{VersionGap: 1, LostEffect: 1}, effects: 2, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions = []inbox.Transition{s.Transitions[0], {Aggregate: "a", OldVersion: 1, NewVersion: 3, OldBalance: 10, NewBalance: 40}}
			delete(s.Inbox, p.Events[1].Key())
			s.Accounts["a"] = inbox.AccountState{Balance: 40, Version: 3}
		}},
		{name: "stale-applied: v2 over v3", want: map[string]int64{StaleApplied: 1}, effects: 4, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			sn := snap("a", 2)
			sn.Amount = 5
			p.Events = append(p.Events, sn)
			s.Transitions = append(s.Transitions, inbox.Transition{Aggregate: "a", OldVersion: 3, NewVersion: 2, OldBalance: 60, NewBalance: 5})
			s.Inbox[sn.Key()] = true
			s.Accounts["a"] = inbox.AccountState{Balance: 5, Version: 2}
		}},
		{name: "stale-applied: a version no event carries", want: map[string]int64{StaleApplied: 1}, effects: 3, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions = append(s.Transitions, inbox.Transition{Aggregate: "a", OldVersion: 3, NewVersion: 9, OldBalance: 60, NewBalance: 60})
			s.Accounts["a"] = inbox.AccountState{Balance: 60, Version: 9}
		}},
		{name: "inbox-without-effect: the split bug", want: map[string]int64{InboxWithoutEffect: 1}, effects: 2, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions = s.Transitions[:2]
			s.Accounts["a"] = inbox.AccountState{Balance: 30, Version: 2}
		}},
		{name: "effect-without-inbox", want: map[string]int64{EffectWithoutInbox: 1}, effects: 3, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			delete(s.Inbox, p.Events[0].Key())
		}},
		{name: "parked-stuck", want: map[string]int64{ParkedStuck: 1}, effects: 2, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Transitions = s.Transitions[:2]
			delete(s.Inbox, p.Events[2].Key())
			s.Parked[p.Events[2].Key()] = true
			s.Accounts["a"] = inbox.AccountState{Balance: 30, Version: 2}
		}},
		{name: "conflict-accepted: a reused key took effect", want: map[string]int64{ConflictAccepted: 1}, effects: 3, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			c := ev("a", 4, 99)
			c.IdempotencyKey, c.Tenant, c.Operation = "k1", "t1", "pay"
			p.MustNotApply = []*envelope.Event{c}
			s.Inbox[c.Key()] = true
		}},
		{name: "without audit: the final state shows a loss", want: map[string]int64{LostEffect: 1}, effects: 2, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Audited, s.Transitions = false, nil
			delete(s.Inbox, p.Events[2].Key())
			s.Accounts["a"] = inbox.AccountState{Balance: 30, Version: 2}
		}},
		{name: "final state off with no per-event cause", want: map[string]int64{DuplicateEffect: 1}, effects: 3, edit: func(p *workload.Plan, s *inbox.Snapshot) {
			s.Accounts["a"] = inbox.AccountState{Balance: 70, Version: 3}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := judgePlan()
			s := cleanSnap(p)
			tc.edit(p, s)
			inv, effects := Judge(p, s, "c")
			checkAnomalies(t, inv, tc.want)
			if effects != tc.effects {
				t.Errorf("effects %d, want %d", effects, tc.effects)
			}
		})
	}
}

// TestJudgeNamesEveryAnomaly: the table above covers every anomaly the
// checker can name.
// checkAnomalies fails t unless inv names exactly the anomalies want
// (none: a PASS), each with an example.
func checkAnomalies(t *testing.T, inv results.Invariants, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for k, v := range inv.Anomalies {
		if v > 0 {
			got[k] = v
		}
	}
	if want == nil {
		want = map[string]int64{}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("anomalies %v, want %v (examples %v)", got, want, inv.Examples)
	}
	if wantVerdict := map[bool]results.Verdict{true: results.VerdictPass, false: results.VerdictFail}[len(want) == 0]; inv.Verdict != wantVerdict {
		t.Errorf("verdict %s, want %s", inv.Verdict, wantVerdict)
	}
	for name := range want {
		if len(inv.Examples[name]) == 0 {
			t.Errorf("%s counted without an example", name)
		}
	}
}

func TestJudgeNamesEveryAnomaly(t *testing.T) {
	covered := []string{LostEffect, DuplicateEffect, VersionGap, StaleApplied, InboxWithoutEffect, EffectWithoutInbox, ParkedStuck, ConflictAccepted,
		DedupMiss,                                                                                    // TestDecisionsCatchDedupMisses
		ExternalDuplicate, ExternalLost, ExternalWithoutEffect, ProcessingStuck, KeyConflictAccepted} // TestJudgeExternal
	for _, n := range AnomalyNames {
		if !slices.Contains(covered, n) {
			t.Errorf("anomaly %s has no Judge test", n)
		}
	}
}

// TestDecisionsCatchDedupMisses: an event that took effect must be
// decided DUPLICATE from then on; anything else is a dedup miss.
func TestDecisionsCatchDedupMisses(t *testing.T) {
	out := func(id string, r inbox.Result) inbox.Outcome {
		return inbox.Outcome{Source: "s", ID: id, Subject: "a", Version: 1, Result: r}
	}
	d := newDecisions(0)
	for _, o := range []inbox.Outcome{
		out("parked-first", inbox.Parked), out("parked-first", inbox.Parked), out("parked-first", inbox.Applied), // held, then applied: fine
		out("parked-first", inbox.Parked),                      // a redelivery decided while a concurrent commit drained it
		out("dup", inbox.Applied), out("dup", inbox.Duplicate), // recognised: fine
		out("forgotten", inbox.Applied), out("forgotten", inbox.Stale), // version check, not dedup
		out("twice", inbox.Applied), out("twice", inbox.Applied),
		out("undecided", inbox.Applied), {Source: "s", ID: "undecided", Err: errors.New("timeout")}, // no decision: not a miss
	} {
		d.record(o)
	}
	n, ex := d.report()
	if n != 2 || len(ex) != 2 || !strings.Contains(ex[0], "forgotten") || !strings.Contains(ex[0], "STALE") {
		t.Fatalf("misses %d %q, want forgotten (STALE) and twice (APPLIED)", n, ex)
	}
	inv := results.Invariants{Verdict: results.VerdictPass, Anomalies: map[string]int64{}, Examples: map[string][]string{}}
	judgeDecisions(&inv, n, ex)
	if inv.Verdict != results.VerdictFail || inv.Anomalies[DedupMiss] != 2 {
		t.Fatalf("verdict %+v", inv)
	}
}
