package results

import (
	"fmt"
	"math"
	"sort"
)

// Comparing one pair of cells: the metrics (events/s, the ratio to the
// baseline, the latencies, the lock-wait share), Holm's correction over
// them, and the verdicts.

// compareCell compares one pair of cells, metric by metric and verdict
// against verdict, with limit the smallest change that counts.
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
	for _, m := range cellMetrics(b, n, limit) {
		md := m.delta(b, n)
		if m.name == lockWaitMetric && (md.Change.Finding == Regression || md.Change.Finding == Improvement) && math.Abs(n.Contention.LockWaitShare-b.Contention.LockWaitShare) < lockShareFloor {
			md.Change.Finding, md.Note = NoChange, "below 1 point: noise"
		}
		d.Deltas = append(d.Deltas, md)
	}
	holm(d.Deltas)
	for _, m := range d.Deltas {
		if m.Gates {
			d.Regressed = d.Regressed || m.Change.Finding == Regression
			d.Inconclusive = d.Inconclusive || m.Change.Finding == Inconclusive
		}
	}
	d.VerdictRegressed = verdictRegressed(b, n, d.Broken)
	d.Regressed = d.Regressed || d.VerdictRegressed
	return d
}

// verdictRegressed says whether the verdict got worse. A verdict may only
// get worse in one way per kind of strategy: a correct one that stops
// passing, or a negative control that stops being caught. An errored
// cell is worse than any verdict.
func verdictRegressed(b, n *Cell, broken bool) bool {
	switch {
	case n.Error != "" && b.Error == "":
		return true
	case !broken && b.Invariants.Verdict == VerdictPass && n.Invariants.Verdict != VerdictPass:
		return true
	case broken && b.Invariants.Verdict == VerdictFail && n.Invariants.Verdict == VerdictPass:
		return true
	}
	return false
}

// cellMetrics are the metrics compared for cells b and n, in the order
// the comparison lists them.
func cellMetrics(b, n *Cell, limit float64) []metric {
	rated := b.Mode == ModeFixedRate && n.Mode == ModeFixedRate
	lat := func(name string, get func(*Latencies) Summary) metric {
		return metric{name: name, get: func(c *Cell) float64 { return float64(get(&c.Latency).P99) },
			rule: ChangeRule{Threshold: limit}, gates: rated, format: FormatMicrosFloat,
			missing: unless(get(&b.Latency).Count > 0 && get(&n.Latency).Count > 0, "no samples")}
	}
	ms := []metric{{name: eventsMetric, get: func(c *Cell) float64 { return c.Throughput.EventsPerS },
		rule: ChangeRule{Threshold: limit, HigherIsBetter: true}, gates: true, format: FormatRate,
		missing: unless(b.Throughput.EventsPerS > 0, "no throughput in base")}}
	if b.Throughput.VsBaseline > 0 && n.Throughput.VsBaseline > 0 {
		// The ratio to the baseline of the same round never gates: SQL
		// that slows the inbox slows the baseline with it. It tells a
		// change of the broker's path from one of the host's: on the
		// reference machine the first of two runs a few minutes apart
		// measured every cell, the baseline included, about 9% lower,
		// and the ratios moved by 0.04 at most
		// (docs/measurements.md, "`make bench` twice in a row").
		ms = append(ms, metric{name: vsBaselineMetric, get: func(c *Cell) float64 { return c.Throughput.VsBaseline },
			rule: ChangeRule{Threshold: limit, HigherIsBetter: true}, format: FormatShare})
	}
	return append(ms,
		lat("e2e p99", func(l *Latencies) Summary { return l.E2E }),
		lat("dedup p99", func(l *Latencies) Summary { return l.Dedup }),
		metric{name: lockWaitMetric, get: func(c *Cell) float64 { return c.Contention.LockWaitShare },
			rule: ChangeRule{Threshold: limit}, format: FormatShare,
			missing: unless(b.Contention.Samples > 0 && n.Contention.Samples > 0, "contention not sampled")},
	)
}

// unless is why, unless ok.
func unless(ok bool, why string) string {
	if ok {
		return ""
	}
	return why
}

// The metrics' names in a comparison: events/s, and the ratio to the
// baseline of the same round (the "vs none" column).
const (
	eventsMetric     = "events/s"
	vsBaselineMetric = "vs none"
	lockWaitMetric   = "lock-wait share"
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

// holmFamily corrects the family of metrics that gate (or not).
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

// metric is one figure compared over both cells' rounds.
type metric struct {
	name   string
	get    func(*Cell) float64
	rule   ChangeRule
	gates  bool // whether it decides the comparison
	format func(float64) string
	// missing says why the cells cannot be compared on it ("" when
	// they can).
	missing string
}

// delta compares the metric over cells b and n.
func (m metric) delta(b, n *Cell) Delta {
	d := Delta{Metric: m.name, Gates: m.gates, format: m.format}
	if m.missing != "" {
		d.Gates, d.Note = false, m.missing
		return d
	}
	d.Change = CompareRounds(b.RoundValues(m.get), n.RoundValues(m.get), m.rule)
	if !m.gates {
		switch m.name {
		case lockWaitMetric:
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

// cellVerdictWord is the cell's verdict, ERROR for a cell that failed.
func cellVerdictWord(c *Cell) Verdict {
	if c.Error != "" {
		return VerdictError
	}
	return c.Invariants.Verdict
}
