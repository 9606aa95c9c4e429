package render

import (
	"fmt"
	"math"
	"sort"

	"github.com/go-analyze/charts"
	"github.com/inboxbench/inboxbench/results"
)

// rateChart draws one rate-search cell's latency–throughput curve: e2e p50
// and p99 (log scale) at every step's achieved rate, steps in rate order.
func rateChart(c *results.Cell, idx int) (*chart, error) {
	if c.Rate == nil {
		return nil, nil
	}
	steps := append(append([]results.RateStep(nil), c.Rate.Steps...), c.Rate.At...)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Achieved < steps[j].Achieved })
	var labels []string
	p50, p99 := []float64{}, []float64{}
	r := newSpectrumRange()
	for _, st := range steps {
		if st.E2E.Count == 0 {
			continue
		}
		mark := ""
		if !st.Sustainable {
			mark = " ✗"
		}
		labels = append(labels, results.FormatRate(st.Achieved)+mark)
		for _, v := range []int64{st.E2E.P50, st.E2E.P99} {
			l := math.Log10(math.Max(1, float64(v)))
			r.YMin, r.YMax = min(r.YMin, int(math.Floor(l))), max(r.YMax, int(math.Ceil(l)))
		}
		p50 = append(p50, math.Log10(math.Max(1, float64(st.E2E.P50))))
		p99 = append(p99, math.Log10(math.Max(1, float64(st.E2E.P99))))
	}
	if len(labels) == 0 {
		return nil, nil
	}
	r = r.fixed()
	opt := charts.NewLineChartOptionWithData([][]float64{p50, p99})
	opt.Legend = legend([]string{"e2e p50", "e2e p99"})
	opt.XAxis.Labels = labels
	opt.XAxis.Title = "achieved events/s (✗: not sustainable)"
	y := &opt.YAxis[0]
	y.Min, y.Max = charts.Ptr(float64(r.YMin)), charts.Ptr(float64(r.YMax))
	y.LabelCount = r.YMax - r.YMin + 1
	y.PreferNiceIntervals = charts.Ptr(false)
	y.ValueFormatter = func(v float64) string { return results.FormatMicros(int64(math.Round(math.Pow(10, v)))) }
	y.Title = "latency (log scale)"
	opt.LineStrokeWidth = 1.8
	p := newPainter(wideW, wideH)
	svg, err := svgOf(p, p.LineChart(opt))
	if err != nil {
		return nil, fmt.Errorf("rate chart %s: %w", c.Name(), err)
	}
	caption := fmt.Sprintf("Maximum sustainable rate %s/s, limited by %s. Each point is one open-loop step; latency is measured from the intended send time.",
		results.FormatRate(c.Rate.MSR), LimitText(c.Rate.LimitedBy))
	return &chart{ID: fmt.Sprintf("rate-%d", idx), Title: "Latency vs throughput: " + c.Name(), Caption: caption, SVG: svg, Wide: true}, nil
}

// LimitText says in words what limited a rate search or a step.
func LimitText(limit results.Limit) string {
	switch limit {
	case results.LimitPublish:
		return "the publish path (the broker did not take the rate)"
	case results.LimitBacklog:
		return "the consumers (the backlog grew)"
	case results.LimitP99:
		return "latency (e2e p99 over the bound)"
	case results.LimitSteps, results.LimitTime:
		return "the search's " + string(limit) + " bound, before any limit was found"
	case results.LimitFloor:
		return "no rate: even the slowest step was not sustainable"
	case "":
		return "-"
	}
	return string(limit)
}

// RateHeader and RateRows are the rate-search table every writer shows:
// per cell, the maximum sustainable rate, what limited it, and e2e p99 at
// fractions of it.
var RateHeader = []string{"cell", "MSR events/s", "limited by", "p99 @50%", "p99 @80%", "p99 @95%", "steps"}

// RateRows returns one row per rate-search cell of run.
func RateRows(run *results.Run) [][]string {
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		if c.Rate == nil {
			continue
		}
		row := []string{c.Name(), results.FormatRate(c.Rate.MSR), string(c.Rate.LimitedBy)}
		for _, f := range []float64{0.5, 0.8, 0.95} {
			cell := "-"
			if st := c.RateAt(f); st != nil && st.E2E.Count > 0 {
				cell = results.FormatMicros(st.E2E.P99)
			}
			row = append(row, cell)
		}
		rows = append(rows, append(row, fmt.Sprint(len(c.Rate.Steps)+len(c.Rate.At))))
	}
	return rows
}

// StepHeader and StepRows list a rate-search cell's steps.
var StepHeader = []string{"phase", "rate", "achieved", "backlog/s", "publish lag", "e2e p50", "e2e p99", "e2e p99.9", "dedup p99", "lock wait", "drain", "sustainable"}

// StepRows returns one row per step of c, search steps then fixed rates.
func StepRows(c *results.Cell) [][]string {
	if c.Rate == nil {
		return nil
	}
	var rows [][]string
	for _, st := range append(append([]results.RateStep(nil), c.Rate.Steps...), c.Rate.At...) {
		phase := st.Phase
		if st.Fraction > 0 {
			phase = fmt.Sprintf("at %.0f%%", 100*st.Fraction)
		}
		ok := "yes"
		if !st.Sustainable {
			ok = "no: " + string(st.Limit)
		}
		rows = append(rows, []string{phase, results.FormatRate(st.Rate), results.FormatRate(st.Achieved), fmt.Sprintf("%+.0f", st.BacklogSlope),
			results.FormatMicrosFloat(st.PublishLagMs * 1000), latencyCell(st.E2E, st.E2E.P50), latencyCell(st.E2E, st.E2E.P99),
			latencyCell(st.E2E, st.E2E.P999), latencyCell(st.Dedup, st.Dedup.P99), results.FormatShare(st.LockWaitShare),
			formatSeconds(st.DrainS), ok})
	}
	return rows
}

// RateNote explains the rate search where it is shown.
const RateNote = "Open-loop steps at rising rates, then bisection: a step is sustainable when the publisher kept its schedule, the backlog did not grow and e2e p99 stayed under the bound. The MSR is the highest sustainable step; the latencies at fractions of it are what a system running at that load would see."

// SaturatedNote warns where saturated cells' latencies are shown.
const SaturatedNote = "Cells published as fast as the broker confirmed (saturated, no workload rate) measure throughput: their latency is time spent queueing in a backlog that grows with the workload's size, not the latency of the system at a rate. For that, run with --find-max-rate (or a publish_rate)."
