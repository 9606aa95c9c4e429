package render

import (
	"fmt"
	"html"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-analyze/charts"
	"github.com/inboxbench/inboxbench/results"
)

// trendMetric is one figure followed over time.
type trendMetric struct {
	ID, Title, Axis string
	// Get returns the cell's value and whether it was measured at all
	// (no duplicates → no dedup latency; measurement off → no lock share).
	Get    func(*results.Cell) (float64, bool)
	Format func(float64) string
	Tick   func(float64) string
	// Stat is the figure's median over a cell's rounds with its interval,
	// in Get's unit (CellStats; a cell of one round has none).
	Stat func(*results.CellStats) results.Estimate
	// HigherIsBetter: events/s; lower is better for latencies and the
	// lock-wait share. It says which way a change point goes.
	HigherIsBetter bool
	// Missing explains a chart with no point at all.
	Missing string
}

var trendMetrics = []trendMetric{
	{ID: "events", Title: "Events per second", Axis: "effects per second",
		Get: func(c *results.Cell) (float64, bool) {
			return c.Throughput.EventsPerS, c.Error == "" && c.Throughput.EventsPerS > 0
		},
		Stat:   func(s *results.CellStats) results.Estimate { return s.EventsPerS },
		Format: results.FormatRate, Tick: axisNumber, HigherIsBetter: true, Missing: "No throughput recorded (the cells did not complete)."},
	{ID: "e2e-p99", Title: "End-to-end p99", Axis: "e2e p99",
		Get:    func(c *results.Cell) (float64, bool) { return float64(c.Latency.E2E.P99), c.Latency.E2E.Count > 0 },
		Stat:   func(s *results.CellStats) results.Estimate { return s.E2EP99 },
		Format: results.FormatMicrosFloat, Tick: results.FormatMicrosFloat, Missing: "No end-to-end latency recorded."},
	{ID: "dedup-p99", Title: "Dedup p99", Axis: "dedup p99",
		Get:    func(c *results.Cell) (float64, bool) { return float64(c.Latency.Dedup.P99), c.Latency.Dedup.Count > 0 },
		Stat:   func(s *results.CellStats) results.Estimate { return s.DedupP99 },
		Format: results.FormatMicrosFloat, Tick: results.FormatMicrosFloat, Missing: "No duplicate was delivered in these runs, so there is no dedup latency to plot (the workload injects no duplicates)."},
	{ID: "lock-share", Title: "Lock-wait share", Axis: "lock-wait share",
		Get: func(c *results.Cell) (float64, bool) {
			return 100 * c.Contention.LockWaitShare, c.Contention.Samples > 0
		},
		Stat: func(s *results.CellStats) results.Estimate {
			e := s.LockWaitShare
			e.Median, e.Lo, e.Hi = 100*e.Median, 100*e.Lo, 100*e.Hi
			return e
		},
		Format: func(v float64) string { return results.FormatShare(v / 100) }, Tick: func(v float64) string { return axisNumber(v) + "%" },
		Missing: "No lock sampling recorded (measurement was off)."},
}

// TrendThreshold is the smallest relative change a trend marks as a
// change point by default (PublishOptions.Threshold): bench compare's
// default --max-regression.
const TrendThreshold = 0.10

// changes are the metric's change points over the cell's runs: changes
// beyond threshold (relative) that the U test over the rounds shows.
func (m trendMetric) changes(ct *results.CellTrend, threshold float64) []results.TrendChange {
	return ct.ChangePoints(m.Get, results.ChangeRule{Threshold: threshold, HigherIsBetter: m.HigherIsBetter})
}

// changeText is a change point in words: "-23.1% [-30.2%, -15.0%], p=0.002
// n=9+9", suspect ones saying so.
func changeText(c results.TrendChange) string {
	ch := c.Change
	t := fmt.Sprintf("%+.1f%%", 100*ch.Rel())
	if ch.Lo > 0 && ch.Hi > 0 {
		t += fmt.Sprintf(" [%+.1f%%, %+.1f%%]", 100*(ch.Lo-1), 100*(ch.Hi-1))
	}
	p := fmt.Sprintf("p=%.3f", ch.P)
	if ch.P < 0.001 {
		p = "p<0.001"
	}
	t += fmt.Sprintf(", %s n=%d+%d, %s", p, ch.Base.N, ch.New.N, ch.Finding)
	if c.Suspect {
		t += "; suspect: it rests on the newest run alone, a later run confirms or clears it"
	}
	return t
}

// trendChart draws one metric of one cell over its runs: one line per
// series, each point a link to its run's report with its interval over
// the run's rounds as a whisker, and a marker where a change point is.
func trendChart(ct *results.CellTrend, m trendMetric, id string, site map[*results.Run]*siteRun, changes []results.TrendChange, threshold float64) (*chart, error) {
	n := len(ct.Points)
	values := make([][]float64, len(ct.Series))
	for s := range values {
		values[s] = nullPad(nil, n)
	}
	links := make([][]pointLink, len(ct.Series))
	labels := timeLabels(ct.Points, site)
	changeAt := map[int]results.TrendChange{}
	for _, c := range changes {
		changeAt[c.Point] = c
	}
	drawn, intervals := false, false
	top := 0.0
	for i, p := range ct.Points {
		v, ok := m.Get(p.Cell)
		if !ok {
			continue
		}
		drawn = true
		values[p.Series][i] = v
		r := site[p.Run]
		l := pointLink{Href: "../" + runHref(r), Value: v,
			Title: fmt.Sprintf("%s · %s · %s: %s", r.ID, longTime(r), m.Title, m.Format(v))}
		if st := p.Cell.Stats; st != nil {
			if e := m.Stat(st); e.N > 1 && e.Hi > 0 {
				l.Lo, l.Hi, l.Interval = e.Lo, e.Hi, true
				l.Title += fmt.Sprintf(" [%s–%s, %.0f%%, %d rounds]", m.Format(e.Lo), m.Format(e.Hi), 100*e.Confidence, e.N)
				intervals = true
				top = max(top, e.Hi)
			}
		}
		if c, ok := changeAt[i]; ok {
			l.Change = &c
			l.Title += " · change point: " + changeText(c)
		}
		top = max(top, v)
		links[p.Series] = append(links[p.Series], l)
	}
	if !drawn {
		return &chart{ID: id, Title: m.Title, Caption: m.Missing}, nil
	}
	names := make([]string, len(ct.Series))
	for s, ser := range ct.Series {
		names[s] = seriesLabel(ct.Name, s, ser, len(ct.Series))
	}
	opt := charts.NewLineChartOptionWithData(values)
	opt.Legend = legend(names)
	opt.XAxis.Labels = labels
	opt.XAxis.BoundaryGap = charts.Ptr(false)
	opt.XAxis.LabelCount = labelCount(labels, halfW-120)
	opt.XAxis.Title = "run start (UTC)"
	opt.YAxis[0].Title = m.Axis
	opt.YAxis[0].Min = charts.Ptr(0.0)
	if intervals {
		// The axis must reach the highest whisker, not only the medians.
		axisMax, labels := niceAxis(top)
		opt.YAxis[0].Max, opt.YAxis[0].LabelCount = charts.Ptr(axisMax), labels
	}
	opt.YAxis[0].ValueFormatter = m.Tick
	opt.Symbol.Shape = charts.SymbolCircle
	opt.Symbol.Size = 4
	opt.LineStrokeWidth = 2
	p := newPainter(halfW, halfH)
	svg, err := svgOf(p, p.LineChart(opt))
	if err != nil {
		return nil, fmt.Errorf("trend chart %s: %w", id, err)
	}
	if svg, err = linkPoints(svg, links); err != nil {
		return nil, fmt.Errorf("trend chart %s: %w", id, err)
	}
	caption := "One point per run (open the run's report by clicking it); a new line starts where the workload or the environment changed."
	if intervals {
		caption += " A point of a run with rounds is their median, its whisker the median's confidence interval."
	}
	if len(changeAt) > 0 {
		caption += fmt.Sprintf(" A red marker is a change point (beyond %.0f%%, U test over the rounds); \"suspect\" rests on the newest run alone.", 100*threshold)
	}
	return &chart{ID: id, Title: m.Title, SVG: svg, Caption: caption}, nil
}

// niceAxis is an axis from 0 that reaches v with a little room: its
// maximum, a multiple of a round step (1, 2, 2.5 or 5 times a power of
// ten) with 4 to 8 steps, and the number of labels (steps + 1).
func niceAxis(v float64) (float64, int) {
	if v <= 0 {
		return 1, 2
	}
	v *= 1.05
	raw := v / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * p
	for _, f := range []float64{1, 2, 2.5, 5} {
		if f*p >= raw {
			step = f * p
			break
		}
	}
	n := int(math.Ceil(v/step - 1e-9))
	return float64(n) * step, n + 1
}

// seriesLabel names a series in a chart legend: the cell when it has one
// line, "[2] environment changed" when the line was broken.
func seriesLabel(cell string, i int, s *results.TrendSeries, n int) string {
	switch {
	case n == 1:
		return cell
	case i == 0:
		return "[1]"
	}
	return fmt.Sprintf("[%d] %s", i+1, s.Reason)
}

// timeLabels are the x axis labels: each run's start day, or its minute
// or second when that is needed to tell two runs apart (a nightly job
// reads as days, runs of one afternoon as times).
func timeLabels(points []results.TrendPoint, site map[*results.Run]*siteRun) []string {
	labels := make([]string, len(points))
	for _, layout := range []string{"01-02", "01-02 15:04", "01-02 15:04:05"} {
		seen := map[string]bool{}
		unique := true
		for i, p := range points {
			labels[i] = site[p.Run].ID
			if t := p.Run.StartedAt; !t.IsZero() {
				labels[i] = t.UTC().Format(layout)
			}
			unique = unique && !seen[labels[i]]
			seen[labels[i]] = true
		}
		if unique {
			break
		}
	}
	return labels
}

// labelCount is how many x labels fit in width pixels without touching
// (about 9 px a character at the library's 16 px axis font, plus a gap).
func labelCount(labels []string, width int) int {
	longest := 1
	for _, l := range labels {
		longest = max(longest, len([]rune(l)))
	}
	return max(2, min(len(labels), width/(9*longest+24)))
}

func longTime(r *siteRun) string {
	if t := r.Started(); !t.IsZero() {
		return t.UTC().Format("2006-01-02 15:04 UTC")
	}
	return "no start time"
}

// pointLink is what one drawn point links to, with its value, its
// interval (when Interval) and the change point it starts (nil if none).
type pointLink struct {
	Href, Title   string
	Value, Lo, Hi float64
	Interval      bool
	Change        *results.TrendChange
}

var (
	// circleRe finds the point symbols (filled with the background; a
	// one-point line's own stroke is a circle too, but unfilled).
	circleRe = regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)" r="[0-9.]+" style="[^"]*fill:white"/>`)
	// hLineRe finds horizontal lines (grid lines and the x axis): the
	// plot's vertical extent for break markers.
	hLineRe = regexp.MustCompile(`<path d="M ([0-9.]+) ([0-9.]+)\s+L ([0-9.]+) ([0-9.]+)" style="stroke-width:1;`)
)

// linkPoints wraps each data point the chart library drew (circles, in
// series order, nulls skipped) in a link to its run, with a tooltip;
// draws a dashed vertical marker with the series number where each later
// series begins, a whisker over each point with an interval, and a red
// marker where a change point is. The library knows nothing of links or
// intervals; the test TestTrendChartLinksEveryPoint keeps this in step
// with how it draws.
func linkPoints(svg string, links [][]pointLink) (string, error) {
	var flat []pointLink
	starts := map[int]int{} // index in flat of a later series' first point → series index
	for s, ls := range links {
		if len(ls) > 0 && s > 0 {
			starts[len(flat)] = s
		}
		flat = append(flat, ls...)
	}
	circles := circleRe.FindAllStringSubmatchIndex(svg, -1)
	if len(circles) != len(flat) {
		return "", fmt.Errorf("the chart drew %d points for %d values: cannot link them to their runs", len(circles), len(flat))
	}
	top, bottom := plotExtent(svg)
	// Pixels per unit, from the highest point: the y axis starts at 0 on
	// the x axis line.
	scale, highest := 0.0, 0.0
	for i, m := range circles {
		if v := flat[i].Value; v > highest {
			cy, _ := strconv.ParseFloat(svg[m[4]:m[5]], 64)
			if s := (bottom - cy) / v; s > 0 {
				scale, highest = s, v
			}
		}
	}
	y := func(v float64) float64 { return bottom - v*scale }
	var b strings.Builder
	var markers, whiskers []string
	last := 0
	for i, m := range circles {
		b.WriteString(svg[last:m[0]])
		l := flat[i]
		fmt.Fprintf(&b, `<a href="%s"><title>%s</title>%s</a>`, html.EscapeString(l.Href), html.EscapeString(l.Title), svg[m[0]:m[1]])
		last = m[1]
		x := svg[m[2]:m[3]]
		if l.Interval && scale > 0 {
			lo, hi := y(l.Lo), y(l.Hi)
			xf, _ := strconv.ParseFloat(x, 64)
			whiskers = append(whiskers, fmt.Sprintf(`<path d="M %s %.1f L %s %.1f M %.1f %.1f L %.1f %.1f M %.1f %.1f L %.1f %.1f" style="stroke-width:1.5;stroke:rgb(70,70,70);fill:none"/>`,
				x, lo, x, hi, xf-4, lo, xf+4, lo, xf-4, hi, xf+4, hi))
		}
		if s, ok := starts[i]; ok {
			markers = append(markers, fmt.Sprintf(`<g class="series-break"><path d="M %s %.0f L %s %.0f" style="stroke-width:1.5;stroke:rgb(90,90,90);stroke-dasharray:5,4;fill:none"/>`+
				`<text x="%s" y="%.0f" text-anchor="middle" style="font-size:12px;font-weight:bold;fill:rgb(60,60,60)">[%d]</text></g>`,
				x, top, x, bottom, x, top-4, s+1))
		}
		if c := l.Change; c != nil {
			label := fmt.Sprintf("%+.0f%%", 100*c.Change.Rel())
			if c.Suspect {
				label += " suspect"
			}
			markers = append(markers, fmt.Sprintf(`<g class="change-point"><path d="M %s %.0f L %s %.0f" style="stroke-width:2;stroke:rgb(200,40,40);stroke-dasharray:2,3;fill:none"/>`+
				`<text x="%s" y="%.0f" text-anchor="middle" style="font-size:12px;font-weight:bold;fill:rgb(200,40,40)">%s</text></g>`,
				x, top, x, bottom, x, top+14, html.EscapeString(label)))
		}
	}
	b.WriteString(svg[last:])
	out := b.String()
	if len(whiskers) > 0 {
		// Under the points, over the lines: before the first link.
		at := strings.Index(out, "<a href=")
		out = out[:at] + `<g class="intervals">` + strings.Join(whiskers, "") + "</g>" + out[at:]
	}
	if len(markers) > 0 {
		// Drawn last, so the marker lies over the lines.
		end := strings.LastIndex(out, "</svg>")
		out = out[:end] + strings.Join(markers, "") + out[end:]
	}
	return out, nil
}

// plotExtent finds the top grid line and the x axis of a line chart: the
// vertical span a break marker covers.
func plotExtent(svg string) (top, bottom float64) {
	top, bottom = math.Inf(1), math.Inf(-1)
	for _, m := range hLineRe.FindAllStringSubmatch(svg, -1) {
		x1, _ := strconv.ParseFloat(m[1], 64)
		y1, _ := strconv.ParseFloat(m[2], 64)
		x2, _ := strconv.ParseFloat(m[3], 64)
		y2, _ := strconv.ParseFloat(m[4], 64)
		if y1 != y2 || x2-x1 < 100 {
			continue
		}
		top, bottom = math.Min(top, y1), math.Max(bottom, y1)
	}
	if math.IsInf(top, 0) {
		return 50, halfH - 50
	}
	return top, bottom
}
