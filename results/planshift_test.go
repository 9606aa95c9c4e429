package results

import (
	"strings"
	"testing"
)

// planRound is a round of a batch cell whose lock statement took lockMs
// per call; the apply statement takes 13 ms in every round.
func planRound(r int, lockMs float64) Cell {
	schema := "ib_run_none_base_r" + string(rune('0'+r))
	c := roundCell(r, 80000, VerdictPass, true)
	c.Schema = schema
	c.Contention.TopStatements = []Statement{
		{Query: "-- the batch\nWITH ev AS (SELECT * FROM \"" + schema + "\".inbox)", Calls: 3000, MeanMs: 13, TotalMs: 39000},
		{Query: "SELECT id FROM \"" + schema + "\".\"account\" WHERE id = ANY ($1::text[]) ORDER BY id FOR UPDATE", Calls: 3000, MeanMs: lockMs, TotalMs: 3000 * lockMs},
		{Query: "CREATE TABLE \"" + schema + "\".inbox ()", Calls: 1, MeanMs: 30 * lockMs, TotalMs: 30 * lockMs},
	}
	return c
}

func TestPlanNotesNameTheShiftedStatement(t *testing.T) {
	rounds := []Cell{planRound(1, 6.4), planRound(2, 0.21), planRound(3, 0.25), planRound(4, 0.22), planRound(5, 7.1)}
	c := Aggregate(rounds)
	var got []string
	for _, n := range c.Notes {
		if strings.Contains(n, "Plans that hold") {
			got = append(got, n)
		}
	}
	if len(got) != 1 {
		t.Fatalf("notes %q: want one note on the lock statement", c.Notes)
	}
	for _, want := range []string{"round 1, 5:", "`SELECT id FROM \"account\" WHERE id = ANY ($1::text[]) ORDER BY id FOR UPDATE`", "6.40-7.10 ms", "0.21-0.25 ms"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("note %q: want %q in it", got[0], want)
		}
	}
}

func TestPlanNotesLeaveOneTimeAndMinorStatements(t *testing.T) {
	cases := map[string][]Cell{
		// 1.5x between rounds: one plan on a busier or quieter machine.
		"within one plan": {planRound(1, 0.3), planRound(2, 0.2), planRound(3, 0.25)},
		// 3x slower, but under a tenth of the statements' time.
		"minor statement": {planRound(1, 1.0), planRound(2, 0.2), planRound(3, 0.25)},
		// Slow in every round alike: no shift.
		"slow everywhere": {planRound(1, 6), planRound(2, 6.3), planRound(3, 5.9)},
	}
	for name, rounds := range cases {
		if n := planNotes(rounds); len(n) != 0 {
			t.Errorf("%s: notes %q, want none", name, n)
		}
	}
}

func TestStatementHead(t *testing.T) {
	for q, want := range map[string]string{
		"-- comment\n\n  SELECT  a,\n b FROM t": "SELECT a,",
		"-- only a comment":                     "(no SQL)",
		strings.Repeat("x", 100):                strings.Repeat("x", 95) + "…",
	} {
		if got := statementHead(q); got != want {
			t.Errorf("statementHead(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestCompareCarriesPlanNotes(t *testing.T) {
	base := Aggregate([]Cell{planRound(1, 6.4), planRound(2, 0.21), planRound(3, 0.25), planRound(4, 0.22)})
	next := Aggregate([]Cell{planRound(1, 0.2), planRound(2, 0.21), planRound(3, 0.25), planRound(4, 0.22)})
	d := compareCell(&base, &next, 0.1)
	if len(d.Plans) != 1 || !strings.HasPrefix(d.Plans[0], "base: round 1: the statement `SELECT id FROM") {
		t.Fatalf("plans %q: want the base's shifted lock statement only", d.Plans)
	}
}
