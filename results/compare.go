package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// ErrDifferentWorkloads is returned by Compare when the two runs did not
// drive the same workload: their figures measure different things.
var ErrDifferentWorkloads = errors.New("runs used different workloads")

// ParseThreshold reads a regression threshold given as a percentage,
// with or without the sign: "10%", "10", "2.5 %". It returns a fraction
// (0.10).
func ParseThreshold(s string) (float64, error) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not a percentage: give a number ≥ 0, e.g. 10%% or 10", s)
	}
	return v / 100, nil
}

// CompareOptions tune Compare.
type CompareOptions struct {
	// MaxRegression is the smallest change that counts, as a fraction
	// (0.10 = 10%): a regression is a worsening beyond it that the
	// rounds show to be real (p < Alpha).
	MaxRegression float64
	// AllowDifferentWorkloads compares runs whose workload specs differ.
	AllowDifferentWorkloads bool
}

// Delta is one metric of one cell compared.
type Delta struct {
	Metric string
	Change Change
	// Gates says whether the metric decides the comparison: events/s
	// always, latencies only in cells run at a rate (a saturated cell's
	// latency is time spent queueing in its own backlog).
	Gates bool
	// Note says why a metric was not judged, or why a finding was set
	// aside.
	Note   string
	format func(float64) string
}

// Judged reports whether the metric was compared at all.
func (d Delta) Judged() bool { return d.Note == "" || d.Change.Base.N > 0 }

// CellDiff is one broker × strategy present in both runs.
type CellDiff struct {
	Broker, Strategy        string
	Broken                  bool
	BaseVerdict, NewVerdict Verdict
	Deltas                  []Delta
	// VerdictRegressed is set when the new run's verdict is worse than
	// the base's: a correct strategy that stopped passing, or a negative
	// control the checker no longer catches.
	VerdictRegressed bool
	Regressed        bool
	// Inconclusive: a gating metric the rounds could not decide.
	Inconclusive bool
	// Plans: a statement whose time per call shifted between the rounds
	// of a side ("base: …", "new: …"; planNotes): that side's rounds
	// measured two plans, which a finding on it may reflect.
	Plans []string
}

// Comparison is the result of comparing two runs (or two labels of one).
type Comparison struct {
	Base, New         *Run
	BaseName, NewName string // what was compared: run ids, or labels of one run
	Options           CompareOptions
	WorkloadDiffs     []string // "key: base → new", empty when equal
	// EnvDiffs are what differs between the two runs' machines and
	// servers ("cores: 2 → 1"), empty when the same: a change then
	// measures the machines as much as the code.
	EnvDiffs          []string
	Cells             []CellDiff
	OnlyBase, OnlyNew []string // cells present in one run only, not compared
	Regressions       []string // one line per regressed check
	Inconclusive      []string // one line per gating metric the rounds could not decide
	// Single: some compared cell had one round on a side, so its
	// findings rest on the threshold alone.
	Single bool
}

// Regressed reports whether any cell regressed beyond the threshold.
func (c *Comparison) Regressed() bool { return len(c.Regressions) > 0 }

// lockShareFloor is the smallest absolute increase of the lock-wait share
// (in share units, 0.01 = one percentage point) that can count as a
// change. A relative threshold alone would call 0.1% → 0.2% +100%, which
// is sampling noise, not contention.
const lockShareFloor = 0.01

// Compare matches cells by (broker, strategy) and computes per-metric
// deltas. It refuses (ErrDifferentWorkloads) runs of different workloads
// unless opt.AllowDifferentWorkloads.
func Compare(base, next *Run, opt CompareOptions) (*Comparison, error) {
	cmp := &Comparison{Base: base, New: next, Options: opt}
	diffs, err := workloadDiff(base.Workload, next.Workload)
	if err != nil {
		return nil, err
	}
	cmp.WorkloadDiffs = diffs
	cmp.EnvDiffs = envDiffs(base.Env, next.Env)
	if len(diffs) > 0 && !opt.AllowDifferentWorkloads {
		return cmp, fmt.Errorf("%w: %s", ErrDifferentWorkloads, strings.Join(diffs, "; "))
	}
	type key struct{ b, s string }
	newCells := map[key]*Cell{}
	for i := range next.Cells {
		c := &next.Cells[i]
		newCells[key{c.Broker, c.StrategyKey()}] = c
	}
	seen := map[key]bool{}
	for i := range base.Cells {
		b := &base.Cells[i]
		k := key{b.Broker, b.StrategyKey()}
		n := newCells[k]
		if n == nil {
			cmp.OnlyBase = append(cmp.OnlyBase, b.Name())
			continue
		}
		seen[k] = true
		cmp.add(b, n)
	}
	for i := range next.Cells {
		c := &next.Cells[i]
		if !seen[key{c.Broker, c.StrategyKey()}] {
			cmp.OnlyNew = append(cmp.OnlyNew, c.Name())
		}
	}
	return cmp, nil
}

// CompareLabels compares, inside one run, the cells of strategy label
// base with those of label next, broker by broker: an A/B of two strategy
// files (or an A/A of one file under two labels) measured on the same
// machine, interleaved round by round.
func CompareLabels(run *Run, base, next string, opt CompareOptions) (*Comparison, error) {
	cmp := &Comparison{Base: run, New: run, BaseName: run.RunID + " " + base, NewName: run.RunID + " " + next, Options: opt}
	byBroker := map[string]*Cell{}
	var have []string
	for i := range run.Cells {
		c := &run.Cells[i]
		have = append(have, c.Strategy)
		if c.Strategy == next {
			byBroker[c.Broker] = c
		}
	}
	found := false
	for i := range run.Cells {
		b := &run.Cells[i]
		if b.Strategy != base {
			continue
		}
		found = true
		if n := byBroker[b.Broker]; n != nil {
			cmp.add(b, n)
			delete(byBroker, b.Broker)
		} else {
			cmp.OnlyBase = append(cmp.OnlyBase, b.Name())
		}
	}
	for _, n := range byBroker {
		cmp.OnlyNew = append(cmp.OnlyNew, n.Name())
	}
	if !found || len(cmp.Cells)+len(cmp.OnlyNew) == 0 {
		return nil, fmt.Errorf("run %s has no cells of both %q and %q (its strategies: %s)", run.RunID, base, next, strings.Join(uniq(have), ", "))
	}
	return cmp, nil
}

func uniq(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// add compares one cell pair and records what it found.
func (cmp *Comparison) add(b, n *Cell) {
	d := compareCell(b, n, cmp.Options.MaxRegression)
	for _, m := range d.Deltas {
		if !m.Gates {
			continue
		}
		cmp.Single = cmp.Single || m.Change.Single
		switch m.Change.Finding {
		case Regression:
			cmp.Regressions = append(cmp.Regressions, fmt.Sprintf("%s %s %s → %s (%s%s)%s", b.Name(), m.Metric,
				m.format(m.Change.Base.Median), m.format(m.Change.New.Median), FormatChange(m.Change.Rel()), pText(m.Change), baselineMoved(d, m)))
		case Inconclusive:
			cmp.Inconclusive = append(cmp.Inconclusive, fmt.Sprintf("%s %s: %s", b.Name(), m.Metric, m.Change.Why))
		}
	}
	if d.VerdictRegressed {
		cmp.Regressions = append(cmp.Regressions, fmt.Sprintf("%s verdict %s → %s", b.Name(), verdictOrNone(d.BaseVerdict), verdictOrNone(d.NewVerdict)))
	}
	cmp.Cells = append(cmp.Cells, d)
}

// baselineMoved qualifies a regression of events/s whose ratio to the
// baseline did not change: the baseline slowed as much, so what changed is
// something every cell shares (the host, the database, the inbox SQL), not
// this cell's broker path.
func baselineMoved(d CellDiff, m Delta) string {
	if m.Metric != eventsMetric {
		return ""
	}
	for _, v := range d.Deltas {
		if v.Metric == vsBaselineMetric && v.Change.Finding == NoChange && !v.Change.Single {
			return fmt.Sprintf("; vs none unchanged (%s → %s, p=%.3f): the baseline slowed as much, so the change is in what every cell shares (the host, the database, the inbox SQL)",
				v.format(v.Change.Base.Median), v.format(v.Change.New.Median), v.Change.P)
		}
	}
	return ""
}

// StrategyKey is the strategy as cells of different runs are matched
// (compare, trends): its name without the content hash of a strategy
// file (StrategyHash). The hash changes with every edit of the file's SQL,
// and comparing the edited SQL with the previous one is what a CI gate is
// for, so files are matched by name alone.
func (c *Cell) StrategyKey() string {
	if c.StrategyHash == "" {
		return c.Strategy
	}
	return strings.TrimSuffix(c.Strategy, "@"+c.StrategyHash)
}

func verdictOrNone(v Verdict) string {
	if v == "" {
		return "none"
	}
	return string(v)
}

// workloadDiff compares two workload specs semantically (JSON values, not
// bytes) and lists the settings that differ.
func workloadDiff(a, b json.RawMessage) ([]string, error) {
	fa, err := FlattenJSON(a)
	if err != nil {
		return nil, fmt.Errorf("base run: %w", err)
	}
	fb, err := FlattenJSON(b)
	if err != nil {
		return nil, fmt.Errorf("new run: %w", err)
	}
	var va, vb any
	if len(bytes.TrimSpace(a)) > 0 {
		_ = json.Unmarshal(a, &va)
	}
	if len(bytes.TrimSpace(b)) > 0 {
		_ = json.Unmarshal(b, &vb)
	}
	if reflect.DeepEqual(va, vb) {
		return nil, nil
	}
	ma, mb := map[string]string{}, map[string]string{}
	for _, e := range fa {
		ma[e.Key] = e.Value
	}
	for _, e := range fb {
		mb[e.Key] = e.Value
	}
	var out []string
	for _, e := range fa {
		if v, ok := mb[e.Key]; !ok {
			out = append(out, fmt.Sprintf("%s: %s → (absent)", e.Key, e.Value))
		} else if v != e.Value {
			out = append(out, fmt.Sprintf("%s: %s → %s", e.Key, e.Value, v))
		}
	}
	for _, e := range fb {
		if _, ok := ma[e.Key]; !ok {
			out = append(out, fmt.Sprintf("%s: (absent) → %s", e.Key, e.Value))
		}
	}
	if len(out) == 0 {
		out = []string{"the workload specs differ"}
	}
	return out, nil
}

// envDiffs lists what differs between two runs' environments, as the
// trends split series (EnvClass) plus each broker's server version.
func envDiffs(base, next Env) []string {
	// The class without a cell's broker, as "what: base → new".
	all := &Cell{Baseline: true}
	out := classOf(next, all).changes(classOf(base, all))
	names := map[string]bool{}
	for b := range base.Brokers {
		names[b] = true
	}
	for b := range next.Brokers {
		names[b] = true
	}
	for _, b := range slices.Sorted(maps.Keys(names)) {
		if base.Brokers[b] != next.Brokers[b] {
			out = append(out, fmt.Sprintf("%s: %s → %s", b, orDash(base.Brokers[b]), orDash(next.Brokers[b])))
		}
	}
	return out
}
