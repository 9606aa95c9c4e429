package runner

import (
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/service"
	"github.com/inboxbench/inboxbench/workload"
)

// blackBox is what a service cell's checker sees of a service: the
// effects table's changes as the WAL shows them, folded by
// service.History, its final rows and its inbox rows (inbox nil: the
// service has no inbox query).
type blackBox struct {
	changes []service.Change
	inbox   map[string]bool
}

// judge builds the snapshot a service cell judges and judges it.
func (b blackBox) judge(plan *workload.Plan) (map[string]int64, int64) {
	h := service.NewHistory()
	h.Add(b.changes)
	snap := &inbox.Snapshot{Accounts: map[string]inbox.AccountState{}, Inbox: b.inbox, Parked: map[string]bool{}, Audited: true,
		Transitions: h.Transitions(), NoInbox: b.inbox == nil}
	if snap.Inbox == nil {
		snap.Inbox = map[string]bool{}
	}
	for _, c := range b.changes {
		snap.Accounts[c.Aggregate] = inbox.AccountState{Balance: c.State, Version: c.Version}
	}
	inv, effects := Judge(plan, snap, "c")
	return inv.Anomalies, effects
}

// serviceHistory applies plan's events in order as a correct service
// would, each in a commit of its own; edit changes the history first.
func serviceHistory(plan *workload.Plan, edit func(i int, e *envelope.Event, bal int64) []service.Change) blackBox {
	b := blackBox{inbox: map[string]bool{}}
	bal := map[string]int64{}
	at := time.Unix(1_700_000_000, 0)
	for i, e := range plan.Events {
		next := bal[e.Subject] + e.Amount
		if e.Kind == envelope.Snapshot {
			next = e.Amount
		}
		cs := []service.Change{{Op: "UPDATE", Aggregate: e.Subject, State: next, Version: e.AggregateVersion}}
		if edit != nil {
			cs = edit(i, e, next)
		}
		for j := range cs {
			cs[j].Commit = at.Add(time.Duration(i) * time.Millisecond)
			bal[cs[j].Aggregate] = cs[j].State
		}
		if len(cs) > 0 {
			b.inbox[e.Key()] = true
		}
		b.changes = append(b.changes, cs...)
	}
	return b
}

// TestBlackBoxChecker: the checker of a service cell, on synthetic WAL
// histories, names each way a service can get it wrong, with the same
// vocabulary as the suite's own cells.
func TestBlackBoxChecker(t *testing.T) {
	plan := workload.Generate(&workload.Spec{Name: "bb", Seed: 3, Aggregates: 3, Events: 30, SnapshotRatio: 0.3, Amount: workload.Amount{Distribution: "uniform", Min: 1, Max: 9}})
	victim := incrementBeforeIncrement(t, plan)
	v := plan.Events[victim]
	for _, tc := range []struct {
		name string
		box  blackBox
		want map[string]int64
	}{
		{"correct", serviceHistory(plan, nil), nil},
		{"correct, no inbox query", func() blackBox { b := serviceHistory(plan, nil); b.inbox = nil; return b }(), nil},
		{"lost: the event never took effect and its aggregate stopped there", serviceHistory(plan, func(i int, e *envelope.Event, bal int64) []service.Change {
			if e.Subject == v.Subject && e.AggregateVersion >= v.AggregateVersion {
				return nil
			}
			return []service.Change{{Op: "UPDATE", Aggregate: e.Subject, State: bal, Version: e.AggregateVersion}}
		}), map[string]int64{LostEffect: int64(countFrom(plan, v))}},
		{"doubled: applied twice, the second time at the same version", serviceHistory(plan, func(i int, e *envelope.Event, bal int64) []service.Change {
			cs := []service.Change{{Op: "UPDATE", Aggregate: e.Subject, State: bal, Version: e.AggregateVersion}}
			if i == victim {
				cs = append(cs, service.Change{Op: "UPDATE", Aggregate: e.Subject, State: bal + e.Amount, Version: e.AggregateVersion})
			}
			return cs
		}), map[string]int64{DuplicateEffect: 1}},
		{"gap: the successor applied over the missing event", serviceHistory(plan, func(i int, e *envelope.Event, bal int64) []service.Change {
			if i == victim {
				return nil
			}
			if e.Subject == v.Subject && e.AggregateVersion == v.AggregateVersion+1 {
				bal -= v.Amount // the state the service had, without v
			}
			return []service.Change{{Op: "UPDATE", Aggregate: e.Subject, State: bal, Version: e.AggregateVersion}}
		}), map[string]int64{VersionGap: 1, LostEffect: 1}},
		{"stale: an older snapshot applied over a newer state, at the end", func() blackBox {
			b := serviceHistory(plan, nil)
			s := olderSnapshot(t, plan)
			b.changes = append(b.changes, service.Change{Op: "UPDATE", Aggregate: s.Subject, State: s.Amount, Version: s.AggregateVersion, Commit: time.Unix(1_800_000_000, 0)})
			return b
		}(), map[string]int64{StaleApplied: 1}},
		{"split: the inbox row committed, the update did not", func() blackBox {
			b := serviceHistory(plan, func(i int, e *envelope.Event, bal int64) []service.Change {
				if e.Subject == v.Subject && e.AggregateVersion >= v.AggregateVersion {
					return nil
				}
				return []service.Change{{Op: "UPDATE", Aggregate: e.Subject, State: bal, Version: e.AggregateVersion}}
			})
			b.inbox[v.Key()] = true
			return b
		}(), map[string]int64{InboxWithoutEffect: 1, LostEffect: int64(countFrom(plan, v)) - 1}},
		{"effect without inbox row", func() blackBox {
			b := serviceHistory(plan, nil)
			delete(b.inbox, v.Key())
			return b
		}(), map[string]int64{EffectWithoutInbox: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := tc.box.judge(plan)
			for k, n := range got {
				if n == 0 {
					delete(got, k)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("anomalies %v, want %v", got, tc.want)
			}
			for k, n := range tc.want {
				if got[k] != n {
					t.Fatalf("anomalies %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// countFrom counts v and the events after it of its aggregate.
func countFrom(plan *workload.Plan, v *envelope.Event) int {
	n := 0
	for _, e := range plan.Events {
		if e.Subject == v.Subject && e.AggregateVersion >= v.AggregateVersion {
			n++
		}
	}
	return n
}

// olderSnapshot is a snapshot event that is not its aggregate's last.
func olderSnapshot(t *testing.T, plan *workload.Plan) *envelope.Event {
	t.Helper()
	for _, e := range plan.Events {
		if e.Kind == envelope.Snapshot && e.AggregateVersion < plan.Expected[e.Subject].Version {
			return e
		}
	}
	t.Fatal("the plan has no snapshot before its aggregate's last version: change the seed")
	return nil
}

// incrementBeforeIncrement is the index of an increment, past the first
// few events, whose aggregate's next event is an increment too: skipping
// it is a gap, not a snapshot's jump.
func incrementBeforeIncrement(t *testing.T, plan *workload.Plan) int {
	t.Helper()
	for i := 5; i < len(plan.Events); i++ {
		e := plan.Events[i]
		if e.Kind != envelope.Increment {
			continue
		}
		for _, n := range plan.Events[i+1:] {
			if n.Subject == e.Subject {
				if n.Kind == envelope.Increment {
					return i
				}
				break
			}
		}
	}
	t.Fatal("no increment followed by an increment: change the seed")
	return 0
}
