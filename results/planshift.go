package results

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A statement's time per call that differs between the rounds of one
// cell by planShiftRatio or more, in a round where the statement took
// planShiftShare of the statements' time or more, is most likely two
// plans: PostgreSQL planned it one way on some connections and another
// way on others. Measured on the accounts' FOR UPDATE with id = ANY($1):
// 0.2 ms per call in most rounds, 6-10 ms in about one in seven, where it
// took a third of the statements' time and the round ran 20-40% slower
// (docs/strategy-files.md, "Plans that hold"). Within one plan the time
// per call of a busy statement moved by less than 1.5x between rounds.
//
// A statement that handles a batch per call (the batch strategy's INSERT
// of up to batch_size rows) takes longer per call the larger its batches,
// and a consumer's batches are as large as its backlog: on the default
// workload the INSERT took 1.9-7.7 ms per call in some rounds and 8.5-13.9
// ms in others of the same cell, with one plan. Where pg_stat_statements
// counted the rows, a statement is therefore judged by its time per row.
const (
	planShiftRatio = 3.0
	planShiftShare = 0.10
	// planShiftCalls leaves out statements run a few times per round
	// (DDL, the checker's queries), whose means say nothing of a plan.
	planShiftCalls = 100
)

// planNotes names each statement whose time per call shifted between
// the rounds (see planShiftRatio), with the rounds where it was slow, so
// that a reader of a spread cell, or of a comparison that found a change,
// knows the rounds measured two plans rather than one statement.
func planNotes(rounds []Cell) []string {
	type seen struct {
		round   int
		perCall float64 // ms
		perRow  float64 // µs; 0: rows not counted
		share   float64
	}
	var order []string
	by := map[string][]seen{}
	for _, r := range rounds {
		var total float64
		for _, st := range r.Contention.TopStatements {
			total += st.TotalMs
		}
		if total <= 0 {
			continue
		}
		for _, st := range r.Contention.TopStatements {
			if st.Calls < planShiftCalls {
				continue
			}
			// The same statement names each round's own schema.
			q := st.Query
			if r.Schema != "" {
				q = strings.ReplaceAll(q, r.Schema, "")
			}
			if _, ok := by[q]; !ok {
				order = append(order, q)
			}
			var perRow float64
			if st.Rows > 0 {
				perRow = 1000 * st.TotalMs / float64(st.Rows)
			}
			by[q] = append(by[q], seen{r.Round, st.MeanMs, perRow, st.TotalMs / total})
		}
	}
	var notes []string
	for _, q := range order {
		s := by[q]
		// Per row where every round counted rows, else per call.
		time, verb, unit, per := func(x seen) float64 { return x.perCall }, "%.2f", " ms", " per call"
		if !slices.ContainsFunc(s, func(x seen) bool { return x.perRow == 0 }) {
			time, verb, unit, per = func(x seen) float64 { return x.perRow }, "%.1f", " µs", " per row"
		}
		fast := time(slices.MinFunc(s, func(a, b seen) int { return cmp.Compare(time(a), time(b)) }))
		if fast <= 0 {
			continue
		}
		var slow []string
		var slowTimes, others []float64
		for _, x := range s {
			if time(x) >= planShiftRatio*fast && x.share >= planShiftShare {
				slow = append(slow, fmt.Sprint(x.round))
				slowTimes = append(slowTimes, time(x))
			} else {
				others = append(others, time(x))
			}
		}
		if len(slow) == 0 || len(others) == 0 {
			continue
		}
		notes = append(notes, fmt.Sprintf("round %s: the statement `%s` took %s, against %s in the other rounds: "+
			"it most likely ran with another plan there, so the rounds measured two plans (docs/strategy-files.md, \"Plans that hold\")",
			strings.Join(slow, ", "), statementHead(q), valueRange(slowTimes, verb)+unit+per, valueRange(others, verb)+unit))
	}
	return notes
}

// valueRange is the smallest and largest of vs in the format verb:
// "0.21" or "0.21-0.25".
func valueRange(vs []float64, verb string) string {
	lo, hi := fmt.Sprintf(verb, slices.Min(vs)), fmt.Sprintf(verb, slices.Max(vs))
	if lo == hi {
		return lo
	}
	return lo + "-" + hi
}

// statementHead is a statement's first line of SQL (comments skipped),
// cut to a length a note can carry.
func statementHead(q string) string {
	for l := range strings.Lines(q) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--") {
			continue
		}
		l = strings.Join(strings.Fields(strings.ReplaceAll(l, `"".`, "")), " ")
		if r := []rune(l); len(r) > 96 {
			l = string(r[:95]) + "…"
		}
		return l
	}
	return "(no SQL)"
}
