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

// batchRound is a round whose batch INSERT ran calls calls of batch rows
// each at usPerRow µs a row; rows says whether the rows were counted.
func batchRound(r int, batch, usPerRow float64, rows bool) Cell {
	c := roundCell(r, 80000, VerdictPass, true)
	calls := int64(1_000_000 / batch)
	st := Statement{Query: "INSERT INTO inbox (consumer, source, event_id) SELECT …", Calls: calls,
		MeanMs: batch * usPerRow / 1000, TotalMs: float64(calls) * batch * usPerRow / 1000}
	if rows {
		st.Rows = int64(float64(calls) * batch)
	}
	c.Contention.TopStatements = []Statement{st}
	return c
}

// TestPlanNotesJudgeABatchByItsRows: a batch statement's time per call
// follows its batch size, which follows the consumers' backlog; four
// times the rows per call at the same time per row is one plan. Counted
// per call (files without rows), the same rounds read as two plans.
func TestPlanNotesJudgeABatchByItsRows(t *testing.T) {
	rounds := func(rows bool, slowUs float64) []Cell {
		return []Cell{batchRound(1, 100, 12, rows), batchRound(2, 450, 12, rows), batchRound(3, 120, 12, rows), batchRound(4, 480, slowUs, rows)}
	}
	if n := planNotes(rounds(true, 12)); len(n) != 0 {
		t.Errorf("batches of 100-480 rows at 12 µs a row: notes %q, want none", n)
	}
	if n := planNotes(rounds(false, 12)); len(n) != 1 || !strings.Contains(n[0], "per call") {
		t.Errorf("the same rounds without rows: notes %q, want one judged per call", n)
	}
	n := planNotes(rounds(true, 60))
	if len(n) != 1 {
		t.Fatalf("round 4 at 60 µs a row against 12: notes %q, want one", n)
	}
	for _, want := range []string{"round 4:", "took 60.0 µs per row, against 12.0 µs in the other rounds"} {
		if !strings.Contains(n[0], want) {
			t.Errorf("note %q: want %q in it", n[0], want)
		}
	}
}
