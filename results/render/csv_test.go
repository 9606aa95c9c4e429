package render

import (
	"bytes"
	"encoding/csv"
	"path/filepath"
	"testing"

	"github.com/inboxbench/inboxbench/results"
)

func readCSV(t *testing.T, enc Encoder, r *results.Report) [][]string {
	t.Helper()
	var b bytes.Buffer
	if err := enc(&b, r); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll() // also checks every row has the header's width
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestCellsCSV(t *testing.T) {
	r := loadFixture(t, testdata)
	rows := readCSV(t, CellsCSV, r)
	if len(rows) != 1+len(r.Run.Cells) {
		t.Fatalf("%d rows, want header + %d cells", len(rows), len(r.Run.Cells))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	first := rows[1]
	for name, want := range map[string]string{
		"broker": "kafka", "strategy": "tx", "broken": "false", "expected": "PASS", "verdict": "PASS",
		"events_per_s": "200.37", "e2e_p99_us": "12452", "dedup_count": "250", "lock_wait_share": "0.124", "effects": "5000",
	} {
		i, ok := col[name]
		if !ok {
			t.Errorf("no column %q", name)
			continue
		}
		if first[i] != want {
			t.Errorf("%s = %q, want %q", name, first[i], want)
		}
	}
	if got := rows[2][col["anomalies"]]; got != "6" {
		t.Errorf("kafka/broken-split anomalies = %q, want 6", got)
	}
}

func TestSeriesCSV(t *testing.T) {
	r := loadFixture(t, testdata)
	rows := readCSV(t, SeriesCSV, r)
	want := 1
	for _, c := range r.Run.Cells {
		want += len(c.Throughput.Series)
		events := map[string]bool{}
		for _, p := range c.Contention.Series {
			for k := range p.Waiting {
				events[k] = true
			}
		}
		want += len(c.Contention.Series) * (len(events) + 1)
	}
	if len(rows) != want {
		t.Errorf("%d rows, want %d", len(rows), want)
	}
	if got := rows[1]; got[3] != "events_per_s" || got[4] != "1" {
		t.Errorf("first data row = %v", got)
	}
}

func TestCSVConformOnly(t *testing.T) {
	r := loadFixture(t, filepath.Join(testdata, "conform-only"))
	if rows := readCSV(t, CellsCSV, r); len(rows) != 1 {
		t.Errorf("conform-only cells.csv has %d rows, want only the header", len(rows))
	}
}
