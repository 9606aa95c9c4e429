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

// The latency percentile spectra: log10(1/(1-p)) on the x axis, log10(µs)
// on the y axis, labelled with the real values (charts.go says why).

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
