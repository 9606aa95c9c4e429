package render

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/go-analyze/charts"
	"github.com/inboxbench/inboxbench/results"
)

// Charts are rendered server-side to SVG by github.com/go-analyze/charts
// and inlined into report.html, so the report needs no script and no
// network. The library has no logarithmic axis, so latency charts plot
// log10(µs) and label the ticks with the real values at whole decades; the
// percentile axis is resampled evenly in log10(1/(1-p)), HdrHistogram's
// percentile-spectrum style, so the tail gets as much room as the median.

// chart is one rendered figure.
type chart struct {
	ID      string // stable id, also used by tests to find the figure
	Title   string
	Caption string
	SVG     string
	Wide    bool // full width; otherwise two per row
}

const (
	wideW, wideH = 1100, 380
	halfW, halfH = 540, 340
	// spectrumStep is the resampling step in decades of 1/(1-p): 20
	// points per "nine".
	spectrumStep = 0.05
	// maxNines caps the percentile axis at 99.9999% (even, so halving the
	// labels still ends on a whole nine): beyond it the histogram only
	// knows the maximum.
	maxNines = 6
)

func newPainter(w, h int) *charts.Painter {
	return charts.NewPainter(charts.PainterOptions{OutputFormat: charts.ChartOutputSVG, Width: w, Height: h})
}

func svgOf(p *charts.Painter, err error) (string, error) {
	if err != nil {
		return "", err
	}
	b, err := p.Bytes()
	return string(b), err
}

// nullPad extends series to n points with the library's null value, so
// cells of different lengths share one x axis without inventing zeros.
func nullPad(s []float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		if i < len(s) {
			out[i] = s[i]
		} else {
			out[i] = charts.GetNullValue()
		}
	}
	return out
}

func legend(names []string) charts.LegendOption {
	return charts.LegendOption{SeriesNames: names, Symbol: charts.SymbolSquare,
		FontStyle: charts.FontStyle{FontSize: 11}}
}

// throughputChart: durable effects per second over time, one line per cell.
func throughputChart(run *results.Run) (*chart, error) {
	var names []string
	var values [][]float64
	n := 0
	for i := range run.Cells {
		c := &run.Cells[i]
		if len(c.Throughput.Series) == 0 {
			continue
		}
		names = append(names, c.Name())
		values = append(values, c.Throughput.Series)
		n = max(n, len(c.Throughput.Series))
	}
	if n == 0 {
		return nil, nil
	}
	labels := make([]string, n)
	for i := range labels {
		// Point i counts the effects of second i+1 since consumption began.
		labels[i] = strconv.Itoa(i+1) + "s"
	}
	for i := range values {
		values[i] = nullPad(values[i], n)
	}
	opt := charts.NewLineChartOptionWithData(values)
	opt.Legend = legend(names)
	opt.XAxis.Labels = labels
	opt.XAxis.Title = "seconds since consumption began"
	opt.XAxis.BoundaryGap = charts.Ptr(false)
	opt.YAxis[0].Title = "effects per second"
	opt.YAxis[0].Min = charts.Ptr(0.0)
	opt.YAxis[0].ValueFormatter = axisNumber
	opt.Symbol.Shape = charts.SymbolNone
	opt.LineStrokeWidth = 1.6
	p := newPainter(wideW, wideH)
	svg, err := svgOf(p, p.LineChart(opt))
	if err != nil {
		return nil, fmt.Errorf("throughput chart: %w", err)
	}
	return &chart{ID: "throughput-series", Title: "Throughput over time",
		Caption: "Durable effects per second from the start of consumption, one line per broker/strategy (warm-up included here, excluded from events/s).",
		SVG:     svg, Wide: true}, nil
}

// barChart draws one value per cell as horizontal bars with value labels;
// tick formats the value axis's labels given the axis's end (tickNumber,
// tickMicros).
func barChart(id, title, caption, axis string, run *results.Run, get func(*results.Cell) float64, format func(float64) string, tick func(v, end float64) string) (*chart, error) {
	var names []string
	var vals []float64
	for i := len(run.Cells) - 1; i >= 0; i-- { // the category axis runs bottom-up; keep table order top-down
		c := &run.Cells[i]
		names = append(names, c.Name())
		vals = append(vals, get(c))
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := newPainter(halfW, max(160, 60+34*len(names)))
	for i, n := range names {
		names[i] = padLabel(p, n)
	}
	sl := charts.NewSeriesListBar([][]float64{vals}, charts.BarSeriesOption{
		Label: charts.SeriesLabel{Show: charts.Ptr(true), ValueFormatter: format}})
	opt := charts.NewBarChartOptionWithSeries(sl)
	opt.Horizontal = true
	opt.CategoryAxis.Labels = names
	opt.ValueAxis[0].Title = axis
	opt.SeriesLabelPosition = charts.PositionRight
	opt.Padding = charts.Box{Top: 10, Left: 10, Right: 60, Bottom: 10, IsSet: true}
	var top float64
	for _, v := range vals {
		top = math.Max(top, v)
	}
	// The plot's width: the painter's less the padding and the category
	// labels beside it (with their ticks).
	plot := float64(halfW-opt.Padding.Left-opt.Padding.Right-axisGap) - maxTextWidth(p, names)
	step, count := valueTicks(p, top, plot, tick)
	va := &opt.ValueAxis[0]
	va.Min, va.Max = charts.Ptr(0.0), charts.Ptr(step*float64(count-1))
	va.LabelCount = count
	va.PreferNiceIntervals = charts.Ptr(false)
	va.ValueFormatter = func(v float64) string { return tick(v, *va.Max) }
	svg, err := svgOf(p, p.BarChart(opt))
	if err != nil {
		return nil, fmt.Errorf("%s chart: %w", id, err)
	}
	return &chart{ID: id, Title: title, Caption: caption, SVG: svg}, nil
}

const (
	// axisGap is what an axis takes beside its labels: its line, ticks
	// and the space between them and the labels, in px.
	axisGap = 20
	// labelGap is the least space between two tick labels, in px.
	labelGap = 8
	// fallbackWidth: the library lays labels out with Roboto's widths,
	// and the page asks the browser for Roboto, then Arial; a browser with
	// neither (a bare Linux desktop: DejaVu Sans) draws them up to a fifth
	// wider.
	fallbackWidth = 1.2
)

// axisFont is the library's default style of axis labels (12 pt, drawn
// as 16 px), for measuring them.
var axisFont = charts.FontStyle{FontSize: 12, FontColor: charts.ColorBlack}

// padLabel leaves room at the right of a category label for a browser's
// fallback font: the library right-aligns the label against the axis by
// its Roboto width, so a wider font ran it into the axis and the bars.
// The room is non-breaking spaces, which SVG does not collapse.
func padLabel(p *charts.Painter, s string) string {
	w := p.MeasureText(s, 0, axisFont).Width()
	sp := max(1, p.MeasureText(nbsp, 0, axisFont).Width())
	return s + strings.Repeat(nbsp, int(math.Ceil(float64(w)*(fallbackWidth-1)/float64(sp))))
}

const nbsp = "\u00a0"

func maxTextWidth(p *charts.Painter, texts []string) float64 {
	w := 0
	for _, s := range texts {
		w = max(w, p.MeasureText(s, 0, axisFont).Width())
	}
	return float64(w)
}

// valueTicks chooses a value axis from 0 past top (with a tenth to spare)
// in round steps, as many as fit in plot px without two labels touching.
// The library puts each label at the right of its tick and the last one
// flush with the axis's end, so the last two need room for both.
func valueTicks(p *charts.Painter, top, plot float64, tick func(v, end float64) string) (step float64, count int) {
	for step = niceStep(top * 1.1 / 4); ; step = niceStep(step * 1.0001) {
		count = max(2, int(math.Ceil(top*1.1/step))+1) // all-zero data still gets a 0…1 axis
		if count == 2 {
			return step, count
		}
		end := step * float64(count-1)
		labels := make([]string, count)
		for i := range labels {
			labels[i] = tick(step*float64(i), end)
		}
		last := maxTextWidth(p, labels[count-2:])*2 + labelGap
		need := math.Max(maxTextWidth(p, labels)+labelGap, last) * fallbackWidth
		if plot/float64(count-1) >= need {
			return step, count
		}
	}
}

// niceStep rounds a raw tick interval up to 1, 2, 2.5 or 5 × 10^k.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// contentionChart stacks the sampled lock waits of one cell by wait event
// over time: the top of the stack is the number of backends waiting on
// any lock in that second.
func contentionChart(c *results.Cell, idx int) (*chart, error) {
	series := c.Contention.Series
	if len(series) == 0 {
		return nil, nil
	}
	events := map[string]int64{}
	for _, p := range series {
		for k, v := range p.Waiting {
			events[k] += v
		}
	}
	names := topWaits(events)
	labels := make([]string, len(series))
	for t, p := range series {
		labels[t] = strconv.FormatFloat(p.AtS, 'f', -1, 64) + "s"
	}
	var values [][]float64
	for _, k := range names {
		row := make([]float64, len(series))
		for t, p := range series {
			row[t] = float64(p.Waiting[k])
		}
		values = append(values, row)
	}
	stack := len(names) > 0
	if !stack {
		// Nothing ever waited on a lock: a flat zero line makes the
		// absence visible rather than leaving an empty box.
		names = []string{"no lock waits sampled"}
		values = [][]float64{make([]float64, len(series))}
	}
	opt := charts.NewLineChartOptionWithData(values)
	opt.Legend = legend(names)
	opt.XAxis.Labels = labels
	opt.XAxis.BoundaryGap = charts.Ptr(false)
	opt.XAxis.Title = "seconds since sampling began"
	opt.YAxis[0].Title = "backends waiting (stacked)"
	opt.YAxis[0].Min = charts.Ptr(0.0)
	opt.YAxis[0].ValueFormatter = axisNumber
	if !stack {
		opt.YAxis[0].Max = charts.Ptr(1.0)
	}
	opt.Symbol.Shape = charts.SymbolNone
	opt.LineStrokeWidth = 1.2
	opt.StackSeries = charts.Ptr(stack)
	p := newPainter(halfW, halfH)
	svg, err := svgOf(p, p.LineChart(opt))
	if err != nil {
		return nil, fmt.Errorf("contention chart for %s: %w", c.Name(), err)
	}
	return &chart{ID: fmt.Sprintf("contention-%d", idx), Title: "Lock waits over time: " + c.Name(),
		Caption: fmt.Sprintf("Sampled backends waiting on a lock, stacked by wait event; blocked max %d, %s of busy states were lock waits.",
			c.Contention.BlockedMax, results.FormatShare(c.Contention.LockWaitShare)),
		SVG: svg}, nil
}

// counterNames are the counters drawn in the counters chart: the ones
// that tell deliveries, executions and effects apart.
var chartCounters = []string{"published", "deliveries", "executions", "effects", "duplicates", "redeliveries"}

func countersChart(run *results.Run) (*chart, error) {
	if len(run.Cells) == 0 {
		return nil, nil
	}
	var cells []string
	for i := range run.Cells {
		cells = append(cells, run.Cells[i].Name())
	}
	var values [][]float64
	for _, name := range chartCounters {
		row := make([]float64, len(run.Cells))
		for _, col := range counterColumns {
			if col.Name != name {
				continue
			}
			for i := range run.Cells {
				row[i] = float64(col.Get(&run.Cells[i].Counters))
			}
		}
		values = append(values, row)
	}
	opt := charts.NewBarChartOptionWithData(values)
	opt.Legend = legend(chartCounters)
	opt.CategoryAxis.Labels = cells
	opt.ValueAxis[0].Min = charts.Ptr(0.0)
	opt.ValueAxis[0].Title = "count"
	opt.ValueAxis[0].ValueFormatter = func(v float64) string { return results.Thousands(int64(math.Round(v))) }
	if len(cells) > 4 {
		opt.CategoryAxis.LabelRotation = charts.DegreesToRadians(20)
	}
	p := newPainter(wideW, wideH)
	svg, err := svgOf(p, p.BarChart(opt))
	if err != nil {
		return nil, fmt.Errorf("counters chart: %w", err)
	}
	return &chart{ID: "counters", Title: "Counters per cell",
		Caption: "Deliveries and executions may exceed effects (redeliveries, duplicates); effects must equal the distinct events published.",
		SVG:     svg, Wide: true}, nil
}

// runCharts renders every chart of a run, in report order, grouped by section.
type runCharts struct {
	Overview   []*chart
	Rates      []*chart
	Throughput []*chart
	Latency    []*chart
	DedupApply []*chart
	Contention []*chart
	Counters   []*chart
}

func buildCharts(run *results.Run) (*runCharts, error) {
	rc := &runCharts{}
	add := func(dst *[]*chart, c *chart, err error) error {
		if err != nil {
			return err
		}
		if c != nil {
			*dst = append(*dst, c)
		}
		return nil
	}
	c, err := barChart("events-per-s", "Events per second", "Durable effects per second after warm-up.", "events/s", run,
		func(c *results.Cell) float64 { return c.Throughput.EventsPerS }, results.FormatRate, tickNumber)
	if err := add(&rc.Overview, c, err); err != nil {
		return nil, err
	}
	c, err = barChart("e2e-p99", "End-to-end p99", "Intended publish time → commit, 99th percentile.", "e2e p99", run,
		func(c *results.Cell) float64 { return float64(c.Latency.E2E.P99) }, results.FormatMicrosFloat, tickMicros)
	if err := add(&rc.Overview, c, err); err != nil {
		return nil, err
	}
	c, err = throughputChart(run)
	if err := add(&rc.Throughput, c, err); err != nil {
		return nil, err
	}
	for i := range run.Cells {
		c, err := rateChart(&run.Cells[i], i)
		if err := add(&rc.Rates, c, err); err != nil {
			return nil, err
		}
	}

	e2e := collectSpectra(run, "e2e")
	r := newSpectrumRange()
	r.add(e2e)
	c, err = spectrumChart("e2e-spectrum", "End-to-end latency spectrum",
		"Latency at every percentile from intended publish time to commit, both axes logarithmic: p90, p99, p99.9 … are equally spaced, so the tail gets as much room as the median. Lines join the recorded percentiles; the last step is the maximum.",
		e2e, r, wideW, wideH+40)
	if err := add(&rc.Latency, c, err); err != nil {
		return nil, err
	}

	// Dedup and apply share one y range so the side-by-side pair can be
	// compared by eye without reading the tick labels.
	dedup, apply := collectSpectra(run, "dedup"), collectSpectra(run, "apply")
	r = newSpectrumRange()
	r.add(dedup)
	r.add(apply)
	c, err = spectrumChart("dedup-spectrum", "Dedup latency spectrum",
		"Delivery of a duplicate → DUPLICATE decision → ack.", dedup, r, halfW, halfH+40)
	if err := add(&rc.DedupApply, c, err); err != nil {
		return nil, err
	}
	c, err = spectrumChart("apply-spectrum", "Apply latency spectrum",
		"The inbox transaction of a first delivery (same scale as dedup).", apply, r, halfW, halfH+40)
	if err := add(&rc.DedupApply, c, err); err != nil {
		return nil, err
	}

	c, err = barChart("lock-wait-share", "Lock-wait share", "Share of sampled busy backend states waiting on a heavyweight lock.", "lock-wait share", run,
		func(c *results.Cell) float64 { return c.Contention.LockWaitShare * 100 }, func(v float64) string { return results.FormatShare(v / 100) },
		func(v, _ float64) string { return axisNumber(v) + "%" })
	if err := add(&rc.Contention, c, err); err != nil {
		return nil, err
	}
	for i := range run.Cells {
		c, err := contentionChart(&run.Cells[i], i)
		if err := add(&rc.Contention, c, err); err != nil {
			return nil, err
		}
	}
	c, err = countersChart(run)
	if err := add(&rc.Counters, c, err); err != nil {
		return nil, err
	}
	return rc, nil
}

// all lists every chart, for tests and for counting.
func (rc *runCharts) all() []*chart {
	var out []*chart
	for _, g := range [][]*chart{rc.Overview, rc.Rates, rc.Throughput, rc.Latency, rc.DedupApply, rc.Contention, rc.Counters} {
		out = append(out, g...)
	}
	return out
}
