package results

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Trends follow one cell (broker/strategy) of one workload across runs:
// the view a nightly job publishes. Figures are comparable only between
// runs that drove the same workload on the same kind of machine, so each
// cell's points are split into series by a key:
//
//   - the workload: the SHA-256 of the result.json workload object
//     re-encoded canonically (WorkloadHash), so a changed seed, event count,
//     rate or fault ratio starts a new series even under the same name;
//   - the environment class (EnvClass): cores, memory in whole GiB, OS and
//     architecture, PostgreSQL's version, the version of the cell's own
//     broker (a Kafka upgrade does not split a RabbitMQ line), the
//     durability profile, and whether measurement was on.
//
// Deliberately not in the class: the git commit, the Go and client library
// versions (the code under test: a trend exists to show their effect), the
// host name (CI runners of one kind are interchangeable) and command-line
// options that the workload does not record (--workers, --no-audit,
// --partitioned-inbox): keep those fixed in a job that publishes trends.
//
// Points of different series are never joined by a line: each series is
// its own line with its own legend entry, and its first point is marked
// with what changed against the series before it.

// WorkloadHash is the hex SHA-256 of the workload object with its keys
// sorted and no whitespace: two runs of the same resolved spec hash alike
// whatever the order or spacing of their files.
func WorkloadHash(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers keep their text: 0.10 and 0.1 stay apart only if written so
	if err := dec.Decode(&v); err != nil {
		v = string(raw)
	}
	b, _ := json.Marshal(v) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// EnvClass is what must match for two runs' figures to share a line.
type EnvClass struct {
	Cores      int
	MemoryGiB  int64
	OS         string
	Postgres   string
	Broker     string // the cell's broker and its server version
	Durability string
	Measure    bool
}

func classOf(e Env, cell *Cell) EnvClass {
	c := EnvClass{Cores: e.Cores, MemoryGiB: int64(math.Round(float64(e.MemoryMiB) / 1024)), OS: e.OS,
		Postgres: e.Postgres, Durability: DurabilityText(e.Durability), Measure: e.Measure}
	if !cell.Baseline { // a baseline cell has no broker server
		c.Broker = cell.Broker + " " + e.Brokers[cell.Broker]
	}
	return c
}

// changes lists what differs from prev, as "what: before → after".
func (c EnvClass) changes(prev EnvClass) []string {
	var out []string
	add := func(what string, a, b any) {
		if a != b {
			out = append(out, fmt.Sprintf("%s: %v → %v", what, orDash(fmt.Sprint(a)), orDash(fmt.Sprint(b))))
		}
	}
	add("cores", prev.Cores, c.Cores)
	add("memory GiB", prev.MemoryGiB, c.MemoryGiB)
	add("OS", prev.OS, c.OS)
	add("PostgreSQL", prev.Postgres, c.Postgres)
	add("broker", prev.Broker, c.Broker)
	add("durability", prev.Durability, c.Durability)
	add("measurement", prev.Measure, c.Measure)
	return out
}

// Describe is the class in one line, for the series table.
func (c EnvClass) Describe() string {
	parts := []string{fmt.Sprintf("%d cores", c.Cores), fmt.Sprintf("%d GiB", c.MemoryGiB), orDash(c.OS), orDash(c.Postgres)}
	if c.Broker != "" {
		parts = append(parts, c.Broker)
	}
	parts = append(parts, "durability "+c.Durability)
	if !c.Measure {
		parts = append(parts, "measurement off")
	}
	return strings.Join(parts, " · ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// DurabilityText is the durability profile for tables: its name, "custom"
// for settings without one, "-" when the run did not record it.
func DurabilityText(d *Durability) string {
	switch {
	case d == nil || (d.Profile == "" && len(d.Settings) == 0):
		return "-"
	case d.Profile != "":
		return d.Profile
	}
	return "custom"
}

// Trend is one workload name's runs: every cell that ran in two runs or
// more, over time.
type Trend struct {
	Workload string
	Runs     []*Run // oldest first
	Cells    []*CellTrend
	Single   []string // cells that ran once: no trend yet
}

// CellTrend is one cell over time.
type CellTrend struct {
	Name   string // broker/strategy; a strategy file by its name, whatever its hash
	Points []TrendPoint
	Series []*TrendSeries
}

// TrendPoint is one run's figures of a cell.
type TrendPoint struct {
	Run    *Run
	Cell   *Cell
	Series int // index into CellTrend.Series
}

// TrendSeries is a stretch of like runs: same workload, same class.
type TrendSeries struct {
	Workload string // hash
	Class    EnvClass
	// Changes say what differs from the series of the point before this
	// series' first point (empty for the first series).
	Changes []string
	// Reason sums Changes up: "workload changed", "environment changed" or both.
	Reason string
	Count  int
}

// Trends groups benchmark runs, given oldest first, by workload name
// (in name order) and keeps the names with at least one recurring cell.
func Trends(runs []*Run) []*Trend {
	byName := map[string]*Trend{}
	var names []string
	for _, r := range runs {
		name := r.WorkloadName()
		if name == "" {
			name = "unnamed"
		}
		t := byName[name]
		if t == nil {
			t = &Trend{Workload: name}
			byName[name] = t
			names = append(names, name)
		}
		t.Runs = append(t.Runs, r)
	}
	sort.Strings(names)
	var out []*Trend
	for _, name := range names {
		t := byName[name]
		t.fillCells()
		if len(t.Cells) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// HasCell reports whether c's cell has a trend here.
func (t *Trend) HasCell(c *Cell) bool {
	name := c.Broker + "/" + c.StrategyKey()
	for _, ct := range t.Cells {
		if ct.Name == name {
			return true
		}
	}
	return false
}

// fillCells collects each cell's points in run order and splits them
// into series.
func (t *Trend) fillCells() {
	byCell := map[string]*CellTrend{}
	var order []string
	for _, r := range t.Runs {
		for i := range r.Cells {
			c := &r.Cells[i]
			name := c.Broker + "/" + c.StrategyKey()
			ct := byCell[name]
			if ct == nil {
				ct = &CellTrend{Name: name}
				byCell[name] = ct
				order = append(order, name)
			}
			ct.Points = append(ct.Points, TrendPoint{Run: r, Cell: c})
		}
	}
	for _, name := range order {
		ct := byCell[name]
		if len(ct.Points) < 2 {
			t.Single = append(t.Single, name)
			continue
		}
		ct.splitSeries()
		t.Cells = append(t.Cells, ct)
	}
}

// splitSeries assigns each point to the series of its (workload, class)
// key, creating a series the first time a key appears.
func (ct *CellTrend) splitSeries() {
	index := map[string]int{}
	for i := range ct.Points {
		p := &ct.Points[i]
		wl := WorkloadHash(p.Run.Workload)
		cl := classOf(p.Run.Env, p.Cell)
		key := wl + "\x00" + fmt.Sprintf("%+v", cl)
		s, ok := index[key]
		if !ok {
			s = len(ct.Series)
			index[key] = s
			ts := &TrendSeries{Workload: wl, Class: cl}
			if i > 0 {
				prev := ct.Points[i-1]
				ts.describeChange(prev.Run, ct.Series[prev.Series], p.Run)
			}
			ct.Series = append(ct.Series, ts)
		}
		p.Series = s
		ct.Series[s].Count++
	}
}

func (s *TrendSeries) describeChange(prevRun *Run, prev *TrendSeries, run *Run) {
	var reasons []string
	if s.Workload != prev.Workload {
		reasons = append(reasons, "workload changed")
		diffs, err := workloadDiff(prevRun.Workload, run.Workload)
		if err != nil || len(diffs) == 0 {
			diffs = []string{"workload: " + ShortHash(prev.Workload) + " → " + ShortHash(s.Workload)}
		}
		s.Changes = append(s.Changes, diffs...)
	}
	if env := s.Class.changes(prev.Class); len(env) > 0 {
		reasons = append(reasons, "environment changed")
		s.Changes = append(s.Changes, env...)
	}
	s.Reason = strings.Join(reasons, ", ")
}

// ShortHash is a hash cut for display.
func ShortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// TrendChange is a change point of one figure of a cell's trend.
type TrendChange struct {
	// Point is the index in CellTrend.Points of the first run after the
	// change.
	Point int `json:"point"`
	ChangePoint
}

// ChangePoints finds where one figure of the cell changed for good
// across its runs (ChangePoints: binary segmentation with the U test),
// each series on its own, since only like runs compare. get returns a
// cell's (or a round's) value and whether it measured the figure; a cell
// with rounds contributes every round's value, a cell without one value.
// A change that rests on a series' newest run alone is Suspect.
func (ct *CellTrend) ChangePoints(get func(*Cell) (float64, bool), rule ChangeRule) []TrendChange {
	var out []TrendChange
	for s := range ct.Series {
		var idx []int
		var values [][]float64
		for i := range ct.Points {
			if p := &ct.Points[i]; p.Series == s {
				idx = append(idx, i)
				values = append(values, CellValues(p.Cell, get))
			}
		}
		for _, cp := range ChangePoints(values, rule) {
			out = append(out, TrendChange{Point: idx[cp.Index], ChangePoint: cp})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Point < out[j].Point })
	return out
}

// CellValues are a cell's values of a figure: one per round that
// measured it, or the cell's own when it has no rounds (none when it did
// not measure it).
func CellValues(c *Cell, get func(*Cell) (float64, bool)) []float64 {
	if len(c.Rounds) == 0 {
		if v, ok := get(c); ok {
			return []float64{v}
		}
		return nil
	}
	var out []float64
	for i := range c.Rounds {
		if v, ok := get(&c.Rounds[i]); ok {
			out = append(out, v)
		}
	}
	return out
}
