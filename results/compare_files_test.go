package results

import (
	"strings"
	"testing"
)

// TestCompareMatchesEditedStrategyFile: a user strategy file is matched
// across runs by its file name, whatever its content hash, so a CI gate
// compares the edited SQL with the previous one.
func TestCompareMatchesEditedStrategyFile(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	base.Cells[0].Strategy, base.Cells[0].StrategyFile, base.Cells[0].StrategyHash = "file:inbox.sql@aaaaaaaa", "inbox.sql", "aaaaaaaa"
	next.Cells[0].Strategy, next.Cells[0].StrategyFile, next.Cells[0].StrategyHash = "file:inbox.sql@bbbbbbbb", "inbox.sql", "bbbbbbbb"
	next.Cells[0].Throughput.EventsPerS = base.Cells[0].Throughput.EventsPerS / 2
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.OnlyBase)+len(c.OnlyNew) != 0 {
		t.Fatalf("the file's cells were not matched: only base %v, only new %v", c.OnlyBase, c.OnlyNew)
	}
	if !c.Regressed() || !strings.Contains(strings.Join(c.Regressions, "\n"), "file:inbox.sql@aaaaaaaa") {
		t.Fatalf("halved throughput of the edited file not flagged: %v", c.Regressions)
	}
	if got := c.Cells[0].Strategy; got != "file:inbox.sql@aaaaaaaa → file:inbox.sql@bbbbbbbb" {
		t.Errorf("cell diff names %q: want both versions", got)
	}
	// Different files are still different cells; built-in names are untouched.
	a := Cell{Strategy: "file:a.sql@11111111", StrategyFile: "a.sql", StrategyHash: "11111111"}
	b := Cell{Strategy: "file:b.sql@11111111", StrategyFile: "b.sql", StrategyHash: "11111111"}
	if a.StrategyKey() == b.StrategyKey() || (&Cell{Strategy: "tx"}).StrategyKey() != "tx" {
		t.Error("StrategyKey must keep distinct files and built-in names apart")
	}
}
