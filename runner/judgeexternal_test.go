package runner

import (
	"testing"

	"github.com/inboxbench/inboxbench/external"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// The checker's external rules, judged from hand-made snapshots and call
// logs: no database, no service.

// paidLog is the call log of a correct run of judgePlan: one applied request
// per event, keyed by its identity, and a replay of the first.
func paidLog(p *workload.Plan) *external.Log {
	l := &external.Log{}
	for i, e := range p.Events {
		r := inbox.ExternalRequest("c/"+e.Source+"/"+e.ID, e)
		c := external.Call{Op: external.OpPay, Key: r.Key, Reference: r.Reference, Account: r.Account, Amount: r.Amount,
			Fingerprint: r.Fingerprint(), Outcome: external.Applied, Payment: "pay_" + e.ID}
		l.Calls = append(l.Calls, c)
		if i == 0 {
			c.Outcome = external.Replayed
			l.Calls = append(l.Calls, c)
		}
	}
	return l
}

func TestJudgeExternal(t *testing.T) {
	call := func(l *external.Log, i int) *external.Call { return &l.Calls[i] }
	for _, tc := range []struct {
		name string
		edit func(p *workload.Plan, s *inbox.Snapshot, l *external.Log)
		want map[string]int64
	}{
		{name: "clean: one payment per event, a replay", edit: func(*workload.Plan, *inbox.Snapshot, *external.Log) {}},
		{name: "refused and missing calls do not count", edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			l.Calls = append(l.Calls, external.Call{Op: external.OpPay, Reference: p.Events[1].Key(), Outcome: external.Refused},
				external.Call{Op: external.OpQuery, Key: "k", Outcome: external.Missing})
		}},
		{name: "external-duplicate: paid again under a new key", want: map[string]int64{ExternalDuplicate: 1}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			c := *call(l, 2)
			c.Key, c.Payment = c.Key+"#retry", "pay_again"
			l.Calls = append(l.Calls, c)
		}},
		{name: "external-lost: in the database, never paid", want: map[string]int64{ExternalLost: 1}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			l.Calls = l.Calls[:len(l.Calls)-1]
			l.Calls = append(l.Calls, external.Call{Op: external.OpPay, Reference: p.Events[2].Key(), Outcome: external.Refused})
		}},
		{name: "external-without-effect: paid, never in the database", want: map[string]int64{ExternalWithoutEffect: 1, InboxWithoutEffect: 1}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			s.Transitions = s.Transitions[:2]
			s.Accounts["a"] = inbox.AccountState{Balance: 30, Version: 2}
		}},
		{name: "external-without-effect: a request for no event", want: map[string]int64{ExternalWithoutEffect: 1}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			l.Calls = append(l.Calls, external.Call{Op: external.OpPay, Reference: "test a-v1-replay", Outcome: external.Applied, Payment: "pay_x"})
		}},
		{name: "a snapshot overtook a paid increment", edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			sn := snap("a", 2)
			sn.Amount = 25
			p.Events = append(p.Events[:1], sn, p.Events[2])
			p.Expected["a"] = workload.State{Balance: 55, Version: 3}
			// v1 was paid, then overtaken by the snapshot before its change.
			s.Transitions = []inbox.Transition{{Aggregate: "a", OldVersion: 0, NewVersion: 2, OldBalance: 0, NewBalance: 25},
				{Aggregate: "a", OldVersion: 2, NewVersion: 3, OldBalance: 25, NewBalance: 55}}
			s.Inbox = map[string]bool{sn.Key(): true, p.Events[2].Key(): true}
			s.Accounts["a"] = inbox.AccountState{Balance: 55, Version: 3}
			l.Calls = append(l.Calls[:2], l.Calls[3])
		}},
		{name: "key-conflict-accepted: two requests applied under one key", want: map[string]int64{KeyConflictAccepted: 1, ExternalLost: 1, ExternalWithoutEffect: 1}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			c := call(l, 3) // v3's request, under v2's key, with v3's content
			c.Key = call(l, 2).Key
			c.Reference = "test other"
			c.Fingerprint = "different"
		}},
		{name: "key-conflict-accepted: a different request answered with a stored result", want: map[string]int64{KeyConflictAccepted: 1}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			call(l, 1).Fingerprint = "different"
		}},
		{name: "processing-stuck: an operation left in flight", want: map[string]int64{ProcessingStuck: 2}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			s.Unfinished = map[string]string{p.Events[2].Key(): "left PROCESSING after 1 attempt(s)", p.Events[1].Key(): "outbox row never sent"}
		}},
		{name: "without audit: the inbox rows say what took effect", want: map[string]int64{ExternalLost: 1}, edit: func(p *workload.Plan, s *inbox.Snapshot, l *external.Log) {
			s.Audited, s.Transitions = false, nil
			l.Calls = l.Calls[:len(l.Calls)-1]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := judgePlan()
			s := cleanSnap(p)
			l := paidLog(p)
			tc.edit(p, s, l)
			s.External = l
			inv, _ := Judge(p, s, "c")
			checkAnomalies(t, inv, tc.want)
		})
	}
}

// The database is judged alone when the strategy calls nothing.
func TestJudgeWithoutExternalLog(t *testing.T) {
	p := judgePlan()
	s := cleanSnap(p)
	if inv, _ := Judge(p, s, "c"); inv.Verdict != results.VerdictPass {
		t.Fatalf("%+v", inv)
	}
}
