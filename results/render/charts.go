package render

import (
	"fmt"
	"math"
	"sort"
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
	sl := charts.NewSeriesListBar([][]float64{vals}, charts.BarSeriesOption{
		Label: charts.SeriesLabel{Show: charts.Ptr(true), ValueFormatter: format}})
	opt := charts.NewBarChartOptionWithSeries(sl)
	opt.Horizontal = true
	opt.CategoryAxis.Labels = names
	opt.ValueAxis[0].Title = axis
	opt.SeriesLabelPosition = charts.PositionRight
	opt.Padding = charts.Box{Top: 10, Left: 10, Right: 60, Bottom: 10, IsSet: true}
	p := newPainter(halfW, max(160, 60+34*len(names)))
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

// spectrum returns a cell's percentile spectrum for kind, falling back
// to the summary percentiles (marked coarse) when the run recorded none.
func spectrum(c *results.Cell, kind string) (pts []results.Point, coarse bool) {
	if s := c.Latency.Spectrum[kind]; len(s) > 0 {
		pts = append(pts, s...)
	} else {
		var sum results.Summary
		switch kind {
		case "e2e":
			sum = c.Latency.E2E
		case "dedup":
			sum = c.Latency.Dedup
		case "apply":
			sum = c.Latency.Apply
		case "publish":
			sum = c.Latency.Publish
		}
		if sum.Count == 0 {
			return nil, false
		}
		pts = []results.Point{{Percentile: 50, Micros: sum.P50}, {Percentile: 90, Micros: sum.P90}, {Percentile: 99, Micros: sum.P99},
			{Percentile: 99.9, Micros: sum.P999}, {Percentile: 100, Micros: sum.Max}}
		coarse = true
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].Percentile < pts[j].Percentile })
	return pts, coarse
}

// nines is the spectrum x coordinate of percentile p: log10(1/(1-p)),
// so 90% → 1, 99% → 2, 99.9% → 3.
func nines(p float64) float64 { return -math.Log10(1 - p/100) }

// valueAt reads the spectrum at percentile q, returning log10(µs). Between
// two recorded percentiles it interpolates linearly in log–log space (the
// curve is monotone there, and this is how HdrHistogram's plotter joins its
// points); below the first it holds the first value; beyond the last
// finite percentile only the maximum (p100) is known, so it jumps to it.
func valueAt(pts []results.Point, q float64) float64 {
	lg := func(us int64) float64 { return math.Log10(math.Max(1, float64(us))) }
	if q <= pts[0].Percentile {
		return lg(pts[0].Micros)
	}
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if q > b.Percentile+1e-9 {
			continue
		}
		if b.Percentile >= 100 || b.Percentile-a.Percentile < 1e-12 {
			return lg(b.Micros)
		}
		xa, xb := nines(a.Percentile), nines(b.Percentile)
		f := (nines(q) - xa) / (xb - xa)
		return lg(a.Micros) + f*(lg(b.Micros)-lg(a.Micros))
	}
	return lg(pts[len(pts)-1].Micros)
}

// spectrumSeries is one resampled curve.
type spectrumSeries struct {
	Name   string
	Coarse bool
	Pts    []results.Point
}

func collectSpectra(run *results.Run, kind string) []spectrumSeries {
	var out []spectrumSeries
	for i := range run.Cells {
		c := &run.Cells[i]
		if pts, coarse := spectrum(c, kind); len(pts) > 0 {
			out = append(out, spectrumSeries{Name: c.Name(), Coarse: coarse, Pts: pts})
		}
	}
	return out
}

// spectrumRange is the shared axis extent of several spectra: the x range
// in whole nines and the y range in whole decades of µs.
type spectrumRange struct {
	Nines      int
	YMin, YMax int
}

func (r *spectrumRange) add(ss []spectrumSeries) {
	for _, s := range ss {
		for _, p := range s.Pts {
			if p.Percentile < 100 {
				r.Nines = max(r.Nines, int(math.Ceil(nines(p.Percentile)-1e-9)))
			}
			v := math.Log10(math.Max(1, float64(p.Micros)))
			r.YMin = min(r.YMin, int(math.Floor(v)))
			r.YMax = max(r.YMax, int(math.Ceil(v)))
		}
	}
}

func newSpectrumRange() spectrumRange { return spectrumRange{YMin: math.MaxInt, YMax: math.MinInt} }

func (r spectrumRange) fixed() spectrumRange {
	r.Nines = min(max(r.Nines, 2), maxNines)
	if r.YMin > r.YMax { // no data
		r.YMin, r.YMax = 0, 1
	}
	if r.YMax == r.YMin {
		r.YMax++
	}
	return r
}

// percentileLabel names a whole number of nines: 0 → "p0", 1 → "p90",
// 3 → "p99.9" (built as text: 100*(1-10^-5) is not exactly 99.999 in
// floating point).
func percentileLabel(n int) string {
	switch n {
	case 0:
		return "p0"
	case 1:
		return "p90"
	case 2:
		return "p99"
	}
	return "p99." + strings.Repeat("9", n-2)
}

// axisNumber formats a plain axis value with at most three significant
// digits, so ticks read "2.4", not "2.4000000000000004".
func axisNumber(v float64) string {
	if math.Abs(v) >= 1000 {
		return results.Thousands(int64(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// tickNumber labels a count's axis, thousands shortened so that more
// ticks fit: "0", "500", "2,500", "50k", "1.5M".
func tickNumber(v, _ float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return axisNumber(v/1e6) + "M"
	case a >= 1e4:
		return axisNumber(v/1e3) + "k"
	}
	return axisNumber(v)
}

// tickMicros labels a latency axis (µs) in the one unit its end needs, so
// the ticks read "0, 0.5s, 1s, 1.5s" rather than mixing units, and zero
// reads "0" in any unit.
func tickMicros(v, end float64) string {
	if v == 0 {
		return "0"
	}
	switch {
	case end >= 1e6:
		return axisNumber(v/1e6) + "s"
	case end >= 1e3:
		return axisNumber(v/1e3) + "ms"
	}
	return axisNumber(v) + "µs"
}

// spectrumChart draws latency against percentile on log-log axes.
func spectrumChart(id, title, caption string, ss []spectrumSeries, r spectrumRange, w, h int) (*chart, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	r = r.fixed()
	// One labelled tick per nine needs about 100px per nine: a half-width
	// chart labels every other nine (the range rounded up to an even count)
	// so "p99.99" and "p99.999" don't overprint each other.
	every := 1
	if (w-150)/r.Nines < 100 {
		every = 2
		r.Nines += r.Nines % 2
	}
	n := int(math.Round(float64(r.Nines)/spectrumStep)) + 1
	labels := make([]string, n)
	for i := range labels {
		x := float64(i) * spectrumStep
		if math.Abs(x-math.Round(x)) < 1e-9 {
			labels[i] = percentileLabel(int(math.Round(x)))
		} else {
			labels[i] = fmt.Sprintf("p%.4g", 100*(1-math.Pow(10, -x)))
		}
	}
	var names []string
	var values [][]float64
	coarse := false
	for _, s := range ss {
		row := make([]float64, n)
		for i := range row {
			q := 100 * (1 - math.Pow(10, -float64(i)*spectrumStep))
			row[i] = valueAt(s.Pts, q)
		}
		name := s.Name
		if s.Coarse {
			name += " *"
			coarse = true
		}
		names = append(names, name)
		values = append(values, row)
	}
	opt := charts.NewLineChartOptionWithData(values)
	opt.Legend = legend(names)
	opt.XAxis.Labels = labels
	opt.XAxis.LabelCount = r.Nines/every + 1 // ticks on whole nines only
	opt.XAxis.BoundaryGap = charts.Ptr(false)
	opt.XAxis.Title = "percentile (log scale)"
	y := &opt.YAxis[0]
	y.Min, y.Max = charts.Ptr(float64(r.YMin)), charts.Ptr(float64(r.YMax))
	y.LabelCount = r.YMax - r.YMin + 1 // one tick per decade
	y.PreferNiceIntervals = charts.Ptr(false)
	y.ValueFormatter = func(v float64) string { return results.FormatMicros(int64(math.Round(math.Pow(10, v)))) }
	y.Title = "latency (log scale)"
	opt.Symbol.Shape = charts.SymbolNone
	opt.LineStrokeWidth = 1.8
	p := newPainter(w, h)
	svg, err := svgOf(p, p.LineChart(opt))
	if err != nil {
		return nil, fmt.Errorf("%s chart: %w", id, err)
	}
	if coarse {
		caption += " * = no spectrum recorded: drawn from the summary percentiles only (p50/p90/p99/p99.9/max)."
	}
	return &chart{ID: id, Title: title, Caption: caption, SVG: svg, Wide: w == wideW}, nil
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
