package results

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

func TestWorkloadHashIsCanonical(t *testing.T) {
	a := WorkloadHash(json.RawMessage(`{"name":"w","seed":1,"faults":{"a":0.1,"b":2}}`))
	b := WorkloadHash(json.RawMessage("{\n  \"seed\": 1,\n  \"faults\": {\"b\": 2, \"a\": 0.1},\n  \"name\": \"w\"\n}"))
	c := WorkloadHash(json.RawMessage(`{"name":"w","seed":2,"faults":{"a":0.1,"b":2}}`))
	if a != b {
		t.Error("key order or whitespace changed the workload hash")
	}
	if a == c || len(a) != 64 {
		t.Errorf("hashes %s %s", a, c)
	}
}

// trendRun is a run of one cell measured in rounds at the given events/s.
func trendRun(id string, at time.Time, rates ...float64) *Run {
	var rounds []Cell
	for i, v := range rates {
		rounds = append(rounds, Cell{Broker: "kafka", Strategy: "tx", Round: i + 1, Throughput: Throughput{EventsPerS: v},
			Latency: Latencies{E2E: Summary{Count: 100, P50: 1000, P99: 5000}}, Invariants: Invariants{Verdict: VerdictPass}})
	}
	return &Run{SchemaVersion: SchemaVersion, RunID: id, StartedAt: at, FinishedAt: at.Add(time.Minute),
		Env:      Env{Cores: 2, MemoryMiB: 4096, OS: "linux/amd64", Postgres: "PostgreSQL 15", Brokers: map[string]string{"kafka": "4.1.2"}, Measure: true},
		Workload: json.RawMessage(`{"name":"w","events":1000}`), Rounds: len(rates), Cells: []Cell{Aggregate(rounds)}}
}

// wobble is a level with a few percent of deterministic noise, one value
// per round.
func wobble(level float64, seed int) []float64 {
	d := []float64{-0.02, 0.015, -0.005, 0.01, -0.015, 0.02}
	out := make([]float64, 3)
	for i := range out {
		out[i] = level * (1 + d[(seed+i)%len(d)])
	}
	return out
}

func eventsPerS(c *Cell) (float64, bool) { return c.Throughput.EventsPerS, c.Throughput.EventsPerS > 0 }

func trendOf(t *testing.T, runs []*Run) *CellTrend {
	t.Helper()
	ts := Trends(runs)
	if len(ts) != 1 || len(ts[0].Cells) != 1 {
		t.Fatalf("trends: %+v", ts)
	}
	return ts[0].Cells[0]
}

var t0 = time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)

// A step in the middle of a series is one change point, at the step;
// the flat parts have none, and a flat series has none at all.
func TestTrendChangePointAtTheStep(t *testing.T) {
	var runs, flat []*Run
	for i := range 10 {
		level := 50_000.0
		if i >= 5 {
			level = 40_000 // -20% from the sixth run on
		}
		runs = append(runs, trendRun(fmt.Sprint("r", i), t0.Add(time.Duration(i)*24*time.Hour), wobble(level, i)...))
		flat = append(flat, trendRun(fmt.Sprint("f", i), t0.Add(time.Duration(i)*24*time.Hour), wobble(50_000, i)...))
	}
	rule := ChangeRule{Threshold: 0.1, HigherIsBetter: true}
	cps := trendOf(t, runs).ChangePoints(eventsPerS, rule)
	if len(cps) != 1 || cps[0].Point != 5 || cps[0].Change.Finding != Regression || cps[0].Suspect {
		t.Fatalf("change points %+v, want one regression at run 5", cps)
	}
	if cps := trendOf(t, flat).ChangePoints(eventsPerS, rule); len(cps) != 0 {
		t.Errorf("a flat series has change points: %+v", cps)
	}
}

// A drop in the newest run alone is a suspect change point: nothing
// after it confirms it yet.
func TestTrendNewestDropIsSuspect(t *testing.T) {
	var runs []*Run
	for i := range 6 {
		level := 50_000.0
		if i == 5 {
			level = 35_000
		}
		runs = append(runs, trendRun(fmt.Sprint("r", i), t0.Add(time.Duration(i)*time.Hour), wobble(level, i)...))
	}
	cps := trendOf(t, runs).ChangePoints(eventsPerS, ChangeRule{Threshold: 0.1, HigherIsBetter: true})
	if len(cps) != 1 || cps[0].Point != 5 || !cps[0].Suspect {
		t.Fatalf("change points %+v, want a suspect one at the newest run", cps)
	}
}

// Change points are searched within each series: a changed machine
// starts a new line, not a change point.
func TestTrendChangePointsStayInTheirSeries(t *testing.T) {
	var runs []*Run
	for i := range 8 {
		r := trendRun(fmt.Sprint("r", i), t0.Add(time.Duration(i)*time.Hour), wobble(50_000, i)...)
		if i >= 4 {
			r = trendRun(fmt.Sprint("r", i), t0.Add(time.Duration(i)*time.Hour), wobble(20_000, i)...)
			r.Env.Cores = 16
		}
		runs = append(runs, r)
	}
	ct := trendOf(t, runs)
	if len(ct.Series) != 2 {
		t.Fatalf("%d series, want 2", len(ct.Series))
	}
	if cps := ct.ChangePoints(eventsPerS, ChangeRule{Threshold: 0.1, HigherIsBetter: true}); len(cps) != 0 {
		t.Errorf("a new series made a change point: %+v", cps)
	}
}

// CellValues are the rounds' values, or the cell's own without rounds.
func TestCellValues(t *testing.T) {
	r := trendRun("x", t0, 1, 2, 3)
	if got := CellValues(&r.Cells[0], eventsPerS); len(got) != 3 || got[2] != 3 {
		t.Errorf("rounds' values %v", got)
	}
	one := trendRun("y", t0, 7)
	if got := CellValues(&one.Cells[0], eventsPerS); len(got) != 1 || got[0] != 7 {
		t.Errorf("one value %v", got)
	}
	none := Cell{}
	if got := CellValues(&none, eventsPerS); got != nil {
		t.Errorf("an unmeasured figure has values %v", got)
	}
}
