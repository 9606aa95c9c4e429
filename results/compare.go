package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
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
	// MaxRegression is the largest tolerated worsening, as a fraction
	// (0.10 = 10%).
	MaxRegression float64
	// AllowDifferentWorkloads compares runs whose workload specs differ.
	AllowDifferentWorkloads bool
}

// Metric directions.
const (
	HigherIsBetter = iota
	LowerIsBetter
)

// Delta is one metric of one cell in both runs.
type Delta struct {
	Metric    string
	Base, New float64
	// Change is the relative change New/Base − 1 (NaN when it cannot be
	// computed, e.g. no samples on one side).
	Change float64
	// Worse is the change in the bad direction (positive = worse),
	// whatever the metric's direction.
	Worse     float64
	Regressed bool
	Note      string // why a metric was not judged, or a floor applied
	format    func(float64) string
}

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
}

// Comparison is the result of comparing two runs.
type Comparison struct {
	Base, New         *Run
	Options           CompareOptions
	WorkloadDiffs     []string // "key: base → new", empty when equal
	Cells             []CellDiff
	OnlyBase, OnlyNew []string // cells present in one run only, not compared
	Regressions       []string // one line per regressed check
}

// Regressed reports whether any cell regressed beyond the threshold.
func (c *Comparison) Regressed() bool { return len(c.Regressions) > 0 }

// lockShareFloor is the smallest absolute increase of the lock-wait share
// (in share units, 0.01 = one percentage point) that can count as a
// regression. A relative threshold alone would flag 0.1% → 0.2% as +100%,
// which is sampling noise, not contention.
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
		d := compareCell(b, n, opt.MaxRegression)
		for _, m := range d.Deltas {
			if m.Regressed {
				cmp.Regressions = append(cmp.Regressions, fmt.Sprintf("%s %s %s → %s (%s)", b.Name(), m.Metric, m.format(m.Base), m.format(m.New), FormatChange(m.Change)))
			}
		}
		if d.VerdictRegressed {
			cmp.Regressions = append(cmp.Regressions, fmt.Sprintf("%s verdict %s → %s", b.Name(), verdictOrNone(d.BaseVerdict), verdictOrNone(d.NewVerdict)))
		}
		cmp.Cells = append(cmp.Cells, d)
	}
	for i := range next.Cells {
		c := &next.Cells[i]
		if !seen[key{c.Broker, c.StrategyKey()}] {
			cmp.OnlyNew = append(cmp.OnlyNew, c.Name())
		}
	}
	return cmp, nil
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
		// A user strategy file whose SQL changed: the point of the gate.
		d.Strategy = b.Strategy + " → " + n.Strategy
	}
	lat := func(v float64) string { return FormatMicrosFloat(v) }
	d.Deltas = append(d.Deltas,
		delta("events/s", b.Throughput.EventsPerS, n.Throughput.EventsPerS, HigherIsBetter, limit, FormatRate,
			b.Throughput.EventsPerS > 0 && n.Throughput.EventsPerS >= 0, "no throughput in base"),
		delta("e2e p99", float64(b.Latency.E2E.P99), float64(n.Latency.E2E.P99), LowerIsBetter, limit, lat,
			b.Latency.E2E.Count > 0 && n.Latency.E2E.Count > 0, "no e2e samples"),
		delta("dedup p99", float64(b.Latency.Dedup.P99), float64(n.Latency.Dedup.P99), LowerIsBetter, limit, lat,
			b.Latency.Dedup.Count > 0 && n.Latency.Dedup.Count > 0, "no duplicates delivered"),
	)
	ls := delta("lock-wait share", b.Contention.LockWaitShare, n.Contention.LockWaitShare, LowerIsBetter, limit, FormatShare,
		b.Contention.Samples > 0 && n.Contention.Samples > 0, "contention not sampled")
	if ls.Regressed && n.Contention.LockWaitShare-b.Contention.LockWaitShare < lockShareFloor {
		ls.Regressed = false
		ls.Note = "below 1 point: noise"
	}
	if b.Contention.Samples > 0 && n.Contention.Samples > 0 && b.Contention.LockWaitShare == 0 &&
		n.Contention.LockWaitShare >= lockShareFloor && limit < math.Inf(1) {
		// From no lock waits at all to a real share is a regression even
		// though the relative change is infinite.
		ls.Regressed = true
	}
	d.Deltas = append(d.Deltas, ls)
	for _, m := range d.Deltas {
		d.Regressed = d.Regressed || m.Regressed
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

func cellVerdictWord(c *Cell) Verdict {
	if c.Error != "" {
		return VerdictError
	}
	return c.Invariants.Verdict
}

func delta(metric string, base, next float64, dir int, limit float64, format func(float64) string, ok bool, why string) Delta {
	d := Delta{Metric: metric, Base: base, New: next, Change: math.NaN(), Worse: math.NaN(), format: format}
	if !ok {
		d.Note = why
		return d
	}
	switch {
	case base != 0:
		d.Change = next/base - 1
	case next == 0:
		d.Change = 0
	default:
		d.Change = math.Inf(1)
	}
	d.Worse = d.Change
	if dir == HigherIsBetter {
		d.Worse = -d.Change
	}
	// A tiny epsilon keeps "exactly at the threshold" from flipping on
	// floating-point rounding.
	d.Regressed = !math.IsInf(d.Worse, 0) && d.Worse > limit+1e-9
	return d
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

// WriteText prints the comparison as an aligned table followed by the
// verdict line.
func (c *Comparison) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "base: %s\nnew:  %s\n", runLabel(c.Base), runLabel(c.New))
	if len(c.WorkloadDiffs) > 0 {
		fmt.Fprintf(&b, "warning: different workloads, compared anyway as asked:\n")
		for _, d := range c.WorkloadDiffs {
			fmt.Fprintf(&b, "  %s\n", d)
		}
	}
	fmt.Fprintf(&b, "a cell regresses when a metric worsens by more than %s (events/s down; p99s and lock-wait share up)\n\n", strconv.FormatFloat(c.Options.MaxRegression*100, 'f', -1, 64)+"%")
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tmetric\tbase\tnew\tchange\t\t")
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
			mark := ""
			switch {
			case m.Regressed:
				mark = "REGRESSED"
			case m.Note != "":
				mark = m.Note
			case !math.IsNaN(m.Worse) && m.Worse < -c.Options.MaxRegression:
				mark = "improved"
			}
			baseS, newS, ch := m.format(m.Base), m.format(m.New), FormatChange(m.Change)
			if math.IsNaN(m.Change) {
				baseS, newS, ch = dashIf(m.Base == 0, baseS), dashIf(m.New == 0, newS), "n/a"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", label, m.Metric, baseS, newS, ch, mark)
		}
		mark := ""
		if d.VerdictRegressed {
			mark = "REGRESSED"
		}
		fmt.Fprintf(tw, "\tverdict\t%s\t%s\t\t%s\t\n", verdictOrNone(d.BaseVerdict), verdictOrNone(d.NewVerdict), mark)
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
	b.WriteString("\n")
	b.WriteString(c.Summary())
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

// Summary is the one-line verdict of the comparison.
func (c *Comparison) Summary() string {
	if c.Regressed() {
		return fmt.Sprintf("REGRESSION: %d check(s) beyond the threshold: %s", len(c.Regressions), strings.Join(c.Regressions, "; "))
	}
	return fmt.Sprintf("OK: no regression beyond the threshold in %d compared cell(s)", len(c.Cells))
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
