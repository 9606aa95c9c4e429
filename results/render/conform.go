package render

import (
	"fmt"
	"sort"

	"github.com/inboxbench/inboxbench/results"
)

// matrix arranges rows for display: one line per scenario, one column per
// broker/strategy pair, both in first-seen order so the report follows the
// order `bench conform` ran them in.
type conformMatrix struct {
	Scenarios []string
	Columns   []conformColumn
	Cell      map[[2]string]*results.ConformRow // (scenario, column key) → row
}

type conformColumn struct {
	Broker, Strategy string
	Broken           bool
}

func (c conformColumn) key() string { return c.Broker + "/" + c.Strategy }

func newConformMatrix(rows []results.ConformRow) conformMatrix {
	m := conformMatrix{Cell: map[[2]string]*results.ConformRow{}}
	seenS, seenC := map[string]bool{}, map[string]bool{}
	for i := range rows {
		r := &rows[i]
		if !seenS[r.Scenario] {
			seenS[r.Scenario] = true
			m.Scenarios = append(m.Scenarios, r.Scenario)
		}
		col := conformColumn{Broker: r.Broker, Strategy: r.Strategy, Broken: r.Broken}
		if !seenC[col.key()] {
			seenC[col.key()] = true
			m.Columns = append(m.Columns, col)
		}
		m.Cell[[2]string{r.Scenario, col.key()}] = r
	}
	// Correct strategies first, negative controls after them: the reader
	// looks for green on the left and red on the right.
	sort.SliceStable(m.Columns, func(i, j int) bool { return !m.Columns[i].Broken && m.Columns[j].Broken })
	return m
}

// conformOutcome is the short text of one matrix cell.
func conformOutcome(r *results.ConformRow) string {
	switch {
	case r == nil:
		return "—"
	case r.Error != "":
		return string(results.VerdictError)
	case r.AsExpected() && r.Verdict == results.VerdictFail:
		return "FAIL (expected)"
	case r.AsExpected() && r.Broken:
		return "PASS (not targeted)"
	case r.AsExpected():
		return "PASS"
	default:
		return fmt.Sprintf("%s (expected %s)", r.Verdict, r.Expected)
	}
}
