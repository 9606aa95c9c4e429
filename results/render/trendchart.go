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
	// Missing explains a chart with no point at all.
	Missing string
}

var trendMetrics = []trendMetric{
	{ID: "events", Title: "Events per second", Axis: "effects per second",
		Get: func(c *results.Cell) (float64, bool) {
			return c.Throughput.EventsPerS, c.Error == "" && c.Throughput.EventsPerS > 0
		},
		Format: results.FormatRate, Tick: axisNumber, Missing: "No throughput recorded (the cells did not complete)."},
	{ID: "e2e-p99", Title: "End-to-end p99", Axis: "e2e p99",
		Get:    func(c *results.Cell) (float64, bool) { return float64(c.Latency.E2E.P99), c.Latency.E2E.Count > 0 },
		Format: results.FormatMicrosFloat, Tick: results.FormatMicrosFloat, Missing: "No end-to-end latency recorded."},
	{ID: "dedup-p99", Title: "Dedup p99", Axis: "dedup p99",
		Get:    func(c *results.Cell) (float64, bool) { return float64(c.Latency.Dedup.P99), c.Latency.Dedup.Count > 0 },
		Format: results.FormatMicrosFloat, Tick: results.FormatMicrosFloat, Missing: "No duplicate was delivered in these runs, so there is no dedup latency to plot (the workload injects no duplicates)."},
	{ID: "lock-share", Title: "Lock-wait share", Axis: "lock-wait share",
		Get: func(c *results.Cell) (float64, bool) {
			return 100 * c.Contention.LockWaitShare, c.Contention.Samples > 0
		},
		Format: func(v float64) string { return results.FormatShare(v / 100) }, Tick: func(v float64) string { return axisNumber(v) + "%" },
		Missing: "No lock sampling recorded (measurement was off)."},
}

// trendChart draws one metric of one cell over its runs: one line per
// series, each point a link to its run's report.
func trendChart(ct *results.CellTrend, m trendMetric, id string, site map[*results.Run]*siteRun) (*chart, error) {
	n := len(ct.Points)
	values := make([][]float64, len(ct.Series))
	for s := range values {
		values[s] = nullPad(nil, n)
	}
	links := make([][]pointLink, len(ct.Series))
	labels := timeLabels(ct.Points, site)
	drawn := false
	for i, p := range ct.Points {
		v, ok := m.Get(p.Cell)
		if !ok {
			continue
		}
		drawn = true
		values[p.Series][i] = v
		r := site[p.Run]
		links[p.Series] = append(links[p.Series], pointLink{Href: "../" + runHref(r),
			Title: fmt.Sprintf("%s · %s · %s: %s", r.ID, longTime(r), m.Title, m.Format(v))})
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
	return &chart{ID: id, Title: m.Title, SVG: svg,
		Caption: "One point per run (open the run's report by clicking it); a new line starts where the workload or the environment changed."}, nil
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

// pointLink is what one drawn point links to.
type pointLink struct{ Href, Title string }

var (
	// circleRe finds the point symbols (filled with the background; a
	// one-point line's own stroke is a circle too, but unfilled).
	circleRe = regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)" r="[0-9.]+" style="[^"]*fill:white"/>`)
	// hLineRe finds horizontal lines (grid lines and the x axis): the
	// plot's vertical extent for break markers.
	hLineRe = regexp.MustCompile(`<path d="M ([0-9.]+) ([0-9.]+)\s+L ([0-9.]+) ([0-9.]+)" style="stroke-width:1;`)
)

// linkPoints wraps each data point the chart library drew (circles, in
// series order, nulls skipped) in a link to its run, with a tooltip, and
// draws a dashed vertical marker with the series number where each later
// series begins. The library knows nothing of links; the test
// TestTrendChartLinksEveryPoint keeps this in step with how it draws.
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
	var b strings.Builder
	var markers []string
	last := 0
	for i, m := range circles {
		b.WriteString(svg[last:m[0]])
		l := flat[i]
		fmt.Fprintf(&b, `<a href="%s"><title>%s</title>%s</a>`, html.EscapeString(l.Href), html.EscapeString(l.Title), svg[m[0]:m[1]])
		last = m[1]
		if s, ok := starts[i]; ok {
			x := svg[m[2]:m[3]]
			markers = append(markers, fmt.Sprintf(`<g class="series-break"><path d="M %s %.0f L %s %.0f" style="stroke-width:1.5;stroke:rgb(90,90,90);stroke-dasharray:5,4;fill:none"/>`+
				`<text x="%s" y="%.0f" text-anchor="middle" style="font-size:12px;font-weight:bold;fill:rgb(60,60,60)">[%d]</text></g>`,
				x, top, x, bottom, x, top-4, s+1))
		}
	}
	b.WriteString(svg[last:])
	out := b.String()
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
