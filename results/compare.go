package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
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

func pText(c Change) string {
	if c.Single {
		return ", single run"
	}
	return fmt.Sprintf(", p=%.3f n=%d+%d", c.P, c.Base.N, c.New.N)
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

func compareCell(b, n *Cell, limit float64) CellDiff {
	d := CellDiff{Broker: b.Broker, Strategy: b.Strategy, Broken: b.Broken || n.Broken,
		BaseVerdict: cellVerdictWord(b), NewVerdict: cellVerdictWord(n)}
	if n.Strategy != b.Strategy {
		// A user strategy file whose SQL changed (the point of the gate),
		// or two labels of one run.
		d.Strategy = b.Strategy + " → " + n.Strategy
	}
	for _, side := range []struct {
		name string
		c    *Cell
	}{{"base", b}, {"new", n}} {
		for _, p := range planNotes(side.c.Rounds) {
			d.Plans = append(d.Plans, side.name+": "+p)
		}
	}
	rated := b.Mode == ModeFixedRate && n.Mode == ModeFixedRate
	lat := func(metric string, get func(*Latencies) Summary) Delta {
		return metricDelta(metric, b, n, func(c *Cell) float64 { return float64(get(&c.Latency).P99) },
			ChangeRule{Threshold: limit}, rated, FormatMicrosFloat,
			get(&b.Latency).Count > 0 && get(&n.Latency).Count > 0, "no samples")
	}
	d.Deltas = append(d.Deltas,
		metricDelta(eventsMetric, b, n, func(c *Cell) float64 { return c.Throughput.EventsPerS },
			ChangeRule{Threshold: limit, HigherIsBetter: true}, true, FormatRate, b.Throughput.EventsPerS > 0, "no throughput in base"),
	)
	if b.Throughput.VsBaseline > 0 && n.Throughput.VsBaseline > 0 {
		// The ratio to the baseline of the same round never gates: SQL
		// that slows the inbox slows the baseline with it. It tells a
		// change of the broker's path from one of the host's: on the
		// reference machine the first of two runs a few minutes apart
		// measured every cell, the baseline included, about 9% lower,
		// and the ratios moved by 0.04 at most
		// (docs/measurements.md, "`make bench` twice in a row").
		d.Deltas = append(d.Deltas, metricDelta(vsBaselineMetric, b, n, func(c *Cell) float64 { return c.Throughput.VsBaseline },
			ChangeRule{Threshold: limit, HigherIsBetter: true}, false, FormatShare, true, ""))
	}
	d.Deltas = append(d.Deltas,
		lat("e2e p99", func(l *Latencies) Summary { return l.E2E }),
		lat("dedup p99", func(l *Latencies) Summary { return l.Dedup }),
	)
	ls := metricDelta("lock-wait share", b, n, func(c *Cell) float64 { return c.Contention.LockWaitShare },
		ChangeRule{Threshold: limit}, false, FormatShare, b.Contention.Samples > 0 && n.Contention.Samples > 0, "contention not sampled")
	if (ls.Change.Finding == Regression || ls.Change.Finding == Improvement) && math.Abs(n.Contention.LockWaitShare-b.Contention.LockWaitShare) < lockShareFloor {
		ls.Change.Finding, ls.Note = NoChange, "below 1 point: noise"
	}
	d.Deltas = append(d.Deltas, ls)
	holm(d.Deltas)
	for _, m := range d.Deltas {
		if m.Gates {
			d.Regressed = d.Regressed || m.Change.Finding == Regression
			d.Inconclusive = d.Inconclusive || m.Change.Finding == Inconclusive
		}
	}
	// A verdict may only get worse in one way per kind of strategy: a
	// correct one that stops passing, or a negative control that stops
	// being caught. An errored cell is worse than any verdict.
	switch {
	case n.Error != "" && b.Error == "":
		d.VerdictRegressed = true
	case !d.Broken && b.Invariants.Verdict == VerdictPass && n.Invariants.Verdict != VerdictPass:
		d.VerdictRegressed = true
	case d.Broken && b.Invariants.Verdict == VerdictFail && n.Invariants.Verdict == VerdictPass:
		d.VerdictRegressed = true
	}
	d.Regressed = d.Regressed || d.VerdictRegressed
	return d
}

// The metrics' names in a comparison: events/s, and the ratio to the
// baseline of the same round (the "vs none" column).
const (
	eventsMetric     = "events/s"
	vsBaselineMetric = "vs none"
)

// holm applies Holm's correction to a cell's metrics, in two families:
// the metrics that gate the comparison, and the ones shown beside them.
// Each is one more test of the same pair of cells, so of four metrics
// compared at p < Alpha one in five pairs of identical cells would show
// some "change" by chance. Within a family the smallest p must be below
// Alpha/m, the next below Alpha/(m-1), and so on; a finding whose p
// misses its bound is no significant change, and says so. The families
// are apart because a metric that decides nothing must not raise the bar
// for one that does: with five rounds a side, events/s of a saturated
// cell (its only gate) could otherwise only show a regression when every
// round of one side beat every round of the other.
func holm(ds []Delta) {
	holmFamily(ds, true)
	holmFamily(ds, false)
}

func holmFamily(ds []Delta, gates bool) {
	var idx []int
	for i, d := range ds {
		if d.Gates == gates && d.Change.Base.N > 1 && d.Change.New.N > 1 && d.Change.Ratio != 0 {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return ds[idx[a]].Change.P < ds[idx[b]].Change.P })
	m := len(idx)
	family := "gating"
	if !gates {
		family = "other"
	}
	failed := false
	for k, i := range idx {
		c := &ds[i].Change
		bound := Alpha / float64(m-k)
		failed = failed || c.P >= bound
		if failed && (c.Finding == Regression || c.Finding == Improvement) {
			c.Why = fmt.Sprintf("p = %.3f, not below %.4f: Holm's correction over the cell's %d %s metrics compared", c.P, bound, m, family)
			c.Finding = NoChange
		}
	}
}

// metricDelta compares one figure over both cells' rounds; gates says
// whether it decides the comparison.
func metricDelta(metric string, b, n *Cell, get func(*Cell) float64, rule ChangeRule, gates bool, format func(float64) string, ok bool, why string) Delta {
	d := Delta{Metric: metric, Gates: gates, format: format}
	if !ok {
		d.Gates, d.Note = false, why
		return d
	}
	d.Change = CompareRounds(b.RoundValues(get), n.RoundValues(get), rule)
	if !gates {
		switch metric {
		case "lock-wait share":
			d.Note = "not gated"
		case vsBaselineMetric:
			d.Note = "not gated: over the baseline of the same round"
		default:
			d.Note = "not gated: queueing-dominated in a cell without a rate"
		}
		// "Inconclusive" asks for more rounds because the metric decides
		// the comparison; one shown beside the gates is judged by the
		// test alone, as benchstat judges every metric: not significant
		// is no significant change, however far apart the medians
		// (queueing-dominated latencies of two identical saturated cells
		// differ by 20-30% from run to run).
		c := &d.Change
		if c.Finding == Inconclusive && c.Base.N > 1 && c.New.N > 1 && minUTestP(c.Base.N, c.New.N) <= Alpha {
			c.Finding, c.Why = NoChange, ""
		}
	}
	return d
}

func cellVerdictWord(c *Cell) Verdict {
	if c.Error != "" {
		return VerdictError
	}
	return c.Invariants.Verdict
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

// warn writes a warning and its items, one per line, when there are any.
func warn(b *bytes.Buffer, what string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "warning: %s:\n", what)
	for _, d := range items {
		fmt.Fprintf(b, "  %s\n", d)
	}
}

// WriteText prints the comparison as an aligned table followed by the
// verdict line.
func (c *Comparison) WriteText(w io.Writer) error {
	var b bytes.Buffer
	baseName, newName := c.BaseName, c.NewName
	if baseName == "" {
		baseName, newName = runLabel(c.Base), runLabel(c.New)
	}
	fmt.Fprintf(&b, "base: %s\nnew:  %s\n", baseName, newName)
	warn(&b, "different workloads, compared anyway as asked", c.WorkloadDiffs)
	warn(&b, "measured on different machines or servers", c.EnvDiffs)
	fmt.Fprintf(&b, "a change counts beyond %s, when the Mann-Whitney U test over the rounds gives p < %.2f; events/s gates every cell, latencies cells run at a rate\n",
		strconv.FormatFloat(c.Options.MaxRegression*100, 'f', -1, 64)+"%", Alpha)
	if c.Single {
		fmt.Fprintf(&b, "single run: no noise estimate for cells of one round, their findings compare the figures with the threshold alone (bench run --rounds 5 measures the noise)\n")
	}
	b.WriteString("\n")
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tmetric\tbase\tnew\tchange [interval]\ttest\tfinding\t")
	for _, d := range c.Cells {
		name := d.Broker + "/" + d.Strategy
		if d.Broken {
			name += " (negative control)"
		}
		for i, m := range d.Deltas {
			label := ""
			if i == 0 {
				label = name
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", label, m.Metric, side(m.Change.Base, m.format), side(m.Change.New, m.format),
				changeText(m), testText(m), findingText(m))
		}
		mark := ""
		if d.VerdictRegressed {
			mark = "REGRESSION"
		}
		fmt.Fprintf(tw, "\tverdict\t%s\t%s\t\t\t%s\t\n", verdictOrNone(d.BaseVerdict), verdictOrNone(d.NewVerdict), mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(table.String(), "\n") {
		b.WriteString(strings.TrimRight(line, " \n"))
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	if len(c.OnlyBase) > 0 {
		fmt.Fprintf(&b, "\nonly in base (not compared): %s\n", strings.Join(c.OnlyBase, ", "))
	}
	if len(c.OnlyNew) > 0 {
		fmt.Fprintf(&b, "\nonly in new (not compared): %s\n", strings.Join(c.OnlyNew, ", "))
	}
	if len(c.Cells) == 0 {
		fmt.Fprintf(&b, "\nno cell is in both runs: nothing compared\n")
	}
	plans := 0
	for _, d := range c.Cells {
		for _, p := range d.Plans {
			fmt.Fprintf(&b, "\n%s/%s, %s", d.Broker, d.Strategy, p)
			plans++
		}
	}
	if plans > 0 {
		b.WriteString("\n")
	}
	for _, line := range c.Inconclusive {
		fmt.Fprintf(&b, "\ninconclusive: %s", line)
	}
	if len(c.Inconclusive) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("\n")
	b.WriteString(c.Summary())
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

// side is one side's median with its spread.
func side(e Estimate, format func(float64) string) string {
	switch {
	case e.N == 0:
		return "—"
	case e.N == 1:
		return format(e.Median)
	}
	return fmt.Sprintf("%s ±%.0f%%", format(e.Median), 100*e.Spread())
}

func changeText(m Delta) string {
	c := m.Change
	if c.Base.N == 0 || c.New.N == 0 || c.Ratio == 0 {
		return "n/a"
	}
	if c.Lo == 0 || c.Hi == 0 {
		return FormatChange(c.Rel())
	}
	return fmt.Sprintf("%s [%s, %s]", FormatChange(c.Rel()), FormatChange(c.Lo-1), FormatChange(c.Hi-1))
}

func testText(m Delta) string {
	c := m.Change
	switch {
	case c.Base.N == 0 || c.New.N == 0:
		return ""
	case c.Single:
		return "single run"
	}
	return fmt.Sprintf("p=%.3f n=%d+%d", c.P, c.Base.N, c.New.N)
}

func findingText(m Delta) string {
	if m.Note != "" && m.Change.Base.N == 0 {
		return m.Note
	}
	f := string(m.Change.Finding)
	switch m.Change.Finding {
	case Regression:
		f = "REGRESSION"
	case Improvement:
		f = "improvement"
	}
	if m.Change.Single {
		f += " (single run: no noise estimate)"
	}
	if !m.Gates {
		f += " — " + m.Note
	}
	return f
}

// Summary is the one-line verdict of the comparison.
func (c *Comparison) Summary() string {
	switch {
	case c.Regressed():
		return fmt.Sprintf("REGRESSION: %d check(s): %s", len(c.Regressions), strings.Join(c.Regressions, "; "))
	case len(c.Inconclusive) > 0:
		return fmt.Sprintf("INCONCLUSIVE: no regression shown, but %d gating metric(s) could not be decided in %d compared cell(s): more rounds would tell", len(c.Inconclusive), len(c.Cells))
	}
	return fmt.Sprintf("OK: no significant regression in %d compared cell(s)", len(c.Cells))
}

func dashIf(cond bool, s string) string {
	if cond {
		return "—"
	}
	return s
}

func runLabel(r *Run) string {
	s := r.RunID
	if name := r.WorkloadName(); name != "" {
		s += ", workload " + name
	}
	if !r.StartedAt.IsZero() {
		s += ", " + r.StartedAt.UTC().Format("2006-01-02 15:04 MST")
	}
	if r.Env.GitCommit != "" {
		s += ", commit " + r.Env.GitCommit
	}
	return s
}
