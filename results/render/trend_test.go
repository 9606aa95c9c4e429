package render

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

var (
	changeMarkRe = regexp.MustCompile(`<g class="change-point"><path d="M ([0-9.]+) `)
	whiskerRe    = regexp.MustCompile(`<path d="M ([0-9.]+) ([0-9.]+) L [0-9.]+ ([0-9.]+) M `)
	pointRe      = regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)"`)
)

// roundsRun is a run of one kafka/tx cell measured in rounds at the
// given events/s, written into dir/id.
func roundsRun(t *testing.T, dir, id string, at time.Time, rates ...float64) {
	t.Helper()
	var rounds []results.Cell
	for i, v := range rates {
		rounds = append(rounds, results.Cell{Broker: "kafka", Strategy: "tx", Round: i + 1, Throughput: results.Throughput{EventsPerS: v},
			Latency:    results.Latencies{E2E: results.Summary{Count: 100, P50: 1000, P99: 5000}},
			Invariants: results.Invariants{Verdict: results.VerdictPass}})
	}
	run := &results.Run{SchemaVersion: results.SchemaVersion, RunID: id, StartedAt: at, FinishedAt: at.Add(time.Minute),
		Env:      results.Env{Cores: 2, MemoryMiB: 4096, OS: "linux/amd64", Postgres: "PostgreSQL 15", Brokers: map[string]string{"kafka": "4.1.2"}, Measure: true},
		Workload: json.RawMessage(`{"name":"steps","events":1000}`), Rounds: len(rates), Cells: []results.Cell{results.Aggregate(rounds)}}
	if _, err := run.Write(filepath.Join(dir, id)); err != nil {
		t.Fatal(err)
	}
}

func level(v float64, seed int) []float64 {
	d := []float64{-0.02, 0.015, -0.005, 0.01, -0.015, 0.02}
	return []float64{v * (1 + d[seed%6]), v * (1 + d[(seed+1)%6]), v * (1 + d[(seed+2)%6])}
}

// eventsChart is the events/s chart of the trend page's only cell.
func eventsChart(t *testing.T, page string) string {
	t.Helper()
	i := strings.Index(page, `data-chart="trend-0-events"`)
	if i < 0 {
		t.Fatal("no events/s chart on the trend page")
	}
	c := page[i:]
	return c[:strings.Index(c, "</figure>")]
}

// A step in the middle of synthetic runs is marked as one change point,
// at the step, and nothing on the flat parts; each point of a run with
// rounds has its interval drawn as a whisker around it.
func TestPublishMarksTheStep(t *testing.T) {
	dir := t.TempDir()
	for i := range 10 {
		v := 50_000.0
		if i >= 5 {
			v = 40_000
		}
		roundsRun(t, dir, fmt.Sprintf("run-%02d", i), t0.Add(time.Duration(i)*24*time.Hour), level(v, i)...)
	}
	out := filepath.Join(t.TempDir(), "site")
	if _, err := Publish(PublishOptions{Dirs: []string{dir}, Out: out, Now: t0}); err != nil {
		t.Fatal(err)
	}
	page := string(mustReadFile(t, filepath.Join(out, "trends", "steps.html")))
	chart := eventsChart(t, page)
	marks := changeMarkRe.FindAllStringSubmatch(chart, -1)
	points := pointRe.FindAllStringSubmatch(chart, -1)
	if len(marks) != 1 || len(points) != 10 {
		t.Fatalf("%d change markers and %d points, want 1 and 10", len(marks), len(points))
	}
	if marks[0][1] != points[5][1] {
		t.Errorf("the change marker is at x %s, the step's run at x %s", marks[0][1], points[5][1])
	}
	if !regexp.MustCompile(`>-(1[89]|2[01])%</text>`).MatchString(chart) || strings.Contains(chart, "suspect</text>") {
		t.Error("the marker does not say about -20% (or says suspect)")
	}
	// The other charts are flat: no change point.
	if n := strings.Count(page, `class="change-point"`); n != 1 {
		t.Errorf("%d change markers on the page, want 1 (the other figures are flat)", n)
	}
	changes := page[strings.Index(page, "<h3>Change points</h3>"):]
	changes = changes[:strings.Index(changes, "</table>")]
	if strings.Count(changes, "<tr><td>") != 1 || !strings.Contains(changes, "run-05") || !strings.Contains(changes, "regression") {
		t.Errorf("change points table:\n%s", changes)
	}
	// Whiskers: one per point, around it.
	ws := whiskerRe.FindAllStringSubmatch(chart, -1)
	if len(ws) != 10 {
		t.Fatalf("%d whiskers, want 10", len(ws))
	}
	for i, w := range ws {
		x, lo, hi := w[1], num(w[2]), num(w[3])
		cy := num(points[i][2])
		if x != points[i][1] || !(hi < cy && cy < lo) {
			t.Errorf("whisker %d at x %s from %v to %v, point at x %s y %v", i, x, lo, hi, points[i][1], cy)
		}
	}
	// A threshold above the step: nothing is marked, and the page says
	// which threshold it used.
	out = filepath.Join(t.TempDir(), "site")
	if _, err := Publish(PublishOptions{Dirs: []string{dir}, Out: out, Now: t0, Threshold: 0.25}); err != nil {
		t.Fatal(err)
	}
	page = string(mustReadFile(t, filepath.Join(out, "trends", "steps.html")))
	if n := strings.Count(page, `class="change-point"`); n != 0 || !strings.Contains(page, "a change beyond 25%") {
		t.Errorf("threshold 25%%: %d change markers (want 0), threshold named: %v", n, strings.Contains(page, "a change beyond 25%"))
	}
}

// A drop in the newest run is marked as suspect.
func TestPublishNewestDropSuspect(t *testing.T) {
	dir := t.TempDir()
	for i := range 6 {
		v := 50_000.0
		if i == 5 {
			v = 35_000
		}
		roundsRun(t, dir, fmt.Sprintf("run-%02d", i), t0.Add(time.Duration(i)*time.Hour), level(v, i)...)
	}
	out := filepath.Join(t.TempDir(), "site")
	if _, err := Publish(PublishOptions{Dirs: []string{dir}, Out: out, Now: t0}); err != nil {
		t.Fatal(err)
	}
	chart := eventsChart(t, string(mustReadFile(t, filepath.Join(out, "trends", "steps.html"))))
	marks := changeMarkRe.FindAllStringSubmatch(chart, -1)
	points := pointRe.FindAllStringSubmatch(chart, -1)
	if len(marks) != 1 || marks[0][1] != points[5][1] || !strings.Contains(chart, "suspect</text>") {
		t.Fatalf("want one suspect marker at the newest run: %d markers", len(marks))
	}
}

func num(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
