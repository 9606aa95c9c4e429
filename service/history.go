package service

import (
	"time"

	"github.com/inboxbench/inboxbench/inbox"
)

// History folds the effects table's decoded changes, in commit order,
// into the transitions the checker judges (inbox.Snapshot.Transitions)
// and the moments each version first took effect, which the cell's
// throughput and end-to-end latency are measured from.
type History struct {
	last        map[string]inbox.AccountState
	seen        map[versionKey]bool
	transitions []inbox.Transition
}

type versionKey struct {
	agg string
	v   int64
}

// Effect is one version of an aggregate taking effect for the first time.
type Effect struct {
	Aggregate string
	Version   int64
	Commit    time.Time
}

// NewHistory starts a history of aggregates that all start at version 0,
// balance 0 (a fresh schema).
func NewHistory() *History {
	return &History{last: map[string]inbox.AccountState{}, seen: map[versionKey]bool{}}
}

// Add folds cs (in commit order) and returns the versions that took
// effect for the first time. A change that leaves an aggregate as it was
// (a row created at version 0 to be locked, an update that wrote the
// same values) is no transition. A change forward covers every version
// it passes (a batch may apply v4..v9 in one UPDATE; a snapshot may jump
// over increments): each is stamped with the change's commit time.
func (h *History) Add(cs []Change) []Effect {
	var out []Effect
	for _, c := range cs {
		now := inbox.AccountState{Balance: c.State, Version: c.Version}
		if c.Op == "DELETE" {
			now = inbox.AccountState{}
		}
		was := h.last[c.Aggregate]
		if was == now {
			continue
		}
		h.last[c.Aggregate] = now
		h.transitions = append(h.transitions, inbox.Transition{Aggregate: c.Aggregate,
			OldVersion: was.Version, NewVersion: now.Version, OldBalance: was.Balance, NewBalance: now.Balance})
		from := was.Version + 1
		if now.Version <= was.Version {
			from = now.Version // stale or repeated: only its own version
		}
		for v := from; v <= now.Version && v > 0; v++ {
			k := versionKey{c.Aggregate, v}
			if !h.seen[k] {
				h.seen[k] = true
				out = append(out, Effect{Aggregate: c.Aggregate, Version: v, Commit: c.Commit})
			}
		}
	}
	return out
}

// Transitions returns every transition so far, in commit order.
func (h *History) Transitions() []inbox.Transition { return h.transitions }
