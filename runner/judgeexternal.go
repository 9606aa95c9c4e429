package runner

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/external"
)

// The checker's external rules. The database side says which events took
// effect; the external service's call log (inbox.Snapshot.External) says
// which requests it applied, each naming the event it pays for (its
// reference). Every increment that took effect must have exactly one
// applied request, and nothing else may have one; a key names one
// request; and no operation may be left in flight. Snapshots carry state,
// not an action: they call nothing, and an increment a snapshot overtook
// may have been paid once or not at all.

// took reports whether the event's change is in the database (the audit
// log, or without it, its inbox row).
func (j *judgement) took(e *envelope.Event) bool {
	if j.snap.Audited {
		return j.applied[e.Subject][e.AggregateVersion] > 0
	}
	return j.snap.Inbox[e.Key()]
}

// external judges the call log.
func (j *judgement) external(l *external.Log) {
	paid := map[string][]string{} // reference → payments applied for it
	bound := map[string]string{}  // key → the fingerprint it was applied with
	refused := map[string]int{}   // reference → calls refused or left without an answer
	for _, c := range l.Calls {
		if c.Op != external.OpPay {
			continue
		}
		switch c.Outcome {
		case external.Applied:
			paid[c.Reference] = append(paid[c.Reference], c.Payment)
			if c.Key == "" {
				continue
			}
			if fp, ok := bound[c.Key]; ok && fp != c.Fingerprint {
				j.add(KeyConflictAccepted, "", fmt.Sprintf("key %s: a second, different request (%s, %s %+d) was applied as %s", c.Key, c.Reference, c.Account, c.Amount, c.Payment))
			}
			bound[c.Key] = c.Fingerprint
		case external.Replayed:
			if fp, ok := bound[c.Key]; ok && fp != c.Fingerprint {
				j.add(KeyConflictAccepted, "", fmt.Sprintf("key %s: a different request (%s, %s %+d) was answered with the stored result %s", c.Key, c.Reference, c.Account, c.Amount, c.Payment))
			}
		case external.Refused:
			refused[c.Reference]++
		}
	}
	events := map[string]bool{}
	for _, e := range j.plan.Events {
		k := e.Key()
		events[k] = true
		if e.Kind != envelope.Increment {
			continue
		}
		pays := paid[k]
		switch took := j.took(e); {
		case len(pays) > 1:
			j.add(ExternalDuplicate, "", fmt.Sprintf("%s (%s v%d, +%d) was paid %d times: %s", e.ID, e.Subject, e.AggregateVersion, e.Amount, len(pays), strings.Join(pays, ", ")))
		case len(pays) == 0 && took:
			why := ""
			if n := refused[k]; n > 0 {
				why = fmt.Sprintf(" (%d call(s) refused)", n)
			}
			j.add(ExternalLost, "", fmt.Sprintf("%s (%s v%d, +%d) took effect in the database, and the service applied no request for it%s", e.ID, e.Subject, e.AggregateVersion, e.Amount, why))
		case len(pays) == 1 && !took && !j.superseded[k]:
			j.add(ExternalWithoutEffect, "", fmt.Sprintf("%s (%s v%d, +%d) was paid (%s) but never took effect in the database", e.ID, e.Subject, e.AggregateVersion, e.Amount, pays[0]))
		}
	}
	// Requests for what the stream never asked to take effect (a replay
	// under a new id, a conflicting request) or for no event at all.
	for _, ref := range slices.Sorted(maps.Keys(paid)) {
		if events[ref] {
			continue
		}
		j.add(ExternalWithoutEffect, "", fmt.Sprintf("%s was paid (%s) but is no event the stream asked to take effect", ref, strings.Join(paid[ref], ", ")))
	}
}

// unfinished reports the external operations left in flight.
func (j *judgement) unfinished() {
	for _, k := range slices.Sorted(maps.Keys(j.snap.Unfinished)) {
		j.add(ProcessingStuck, "", fmt.Sprintf("%s: %s at the end of the run", k, j.snap.Unfinished[k]))
	}
}
