package render

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-analyze/charts"

	"github.com/inboxbench/inboxbench/results"
)

// The report as a person sees it at 1280 px: tick labels that do not run
// into each other in a browser without Roboto, latency axes in one unit
// with a plain zero, and a summary table that fits the page.

// makeBenchRun is the fixture's run reshaped as `make bench` leaves one:
// the baseline and three brokers with the batch strategy, tens of
// thousands of events/s with their spread over five rounds, end-to-end
// p99s in seconds, one cell not steady in a round.
func makeBenchRun(t *testing.T) *results.Report {
	t.Helper()
	r := loadFixture(t, testdata)
	tmpl := r.Run.Cells[0]
	var cells []results.Cell
	for i, b := range []struct {
		broker    string
		rate, vs  float64
		p99       int64
		notSteady int
	}{
		{"none", 103047, 0, 212_000, 0},
		{"rabbitmq", 21667, 0.22, 2_200_000, 0},
		{"kafka", 68137, 0.64, 1_900_000, 1},
		{"rocketmq", 49134, 0.48, 2_100_000, 0},
	} {
		c := tmpl
		c.Broker, c.Strategy, c.Broken, c.Baseline = b.broker, "batch", false, i == 0
		c.Throughput.EventsPerS, c.Throughput.VsBaseline, c.Throughput.HostCPUBusy = b.rate, b.vs, 0.88
		c.Latency.E2E = results.Summary{Count: 5000, P50: b.p99 / 3, P90: b.p99 / 2, P99: b.p99, P999: b.p99 * 4 / 3, Max: b.p99 * 3 / 2}
		c.Latency.Spectrum = nil
		c.Window = &results.Window{WarmupS: 5, AskedS: 10, MeasuredS: 10, Steady: true}
		round := c
		c.Rounds = make([]results.Cell, 5)
		for j := range c.Rounds {
			c.Rounds[j] = round
		}
		est := func(m float64) results.Estimate {
			return results.Estimate{N: 5, Median: m, Lo: m * 0.85, Hi: m * 1.1, Confidence: 0.94}
		}
		c.Stats = &results.CellStats{EventsPerS: est(b.rate), NotSteady: b.notSteady}
		if b.vs > 0 {
			vs := est(b.vs)
			c.Stats.VsBaseline = &vs
		}
		cells = append(cells, c)
	}
	r.Run.Cells = cells
	return r
}

// dejaVuEm are DejaVu Sans's advance widths in em, the sans-serif a
// Linux browser falls back to without Roboto or Arial, and wider than
// both: the widths the library does not lay labels out with.
var dejaVuEm = map[rune]float64{',': 0.318, '.': 0.318, ' ': 0.318, 'k': 0.579, 'M': 0.863, 'µ': 0.636,
	'm': 0.974, 's': 0.521, '%': 0.950, '-': 0.361, '\u00a0': 0.318}

func dejaVuWidth(text string, px float64) float64 {
	w := 0.0
	for _, r := range text {
		em, ok := dejaVuEm[r]
		switch {
		case ok:
		case r >= '0' && r <= '9':
			em = 0.636
		default:
			em = 0.65
		}
		w += em * px
	}
	return w
}

var svgText = regexp.MustCompile(`<text x="(-?\d+)" y="(-?\d+)" style="[^"]*font-size:([\d.]+)px[^"]*">([^<]+)</text>`)

type svgLabel struct {
	x, size float64
	text    string
}

// labelRows groups an SVG's texts by baseline: an axis's tick labels
// share one (a bar's value label and a category label each have their
// own).
func labelRows(svg string) map[string][]svgLabel {
	rows := map[string][]svgLabel{}
	for _, m := range svgText.FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		size, _ := strconv.ParseFloat(m[3], 64)
		rows[m[2]] = append(rows[m[2]], svgLabel{x, size, m[4]})
	}
	return rows
}

// overlaps names the labels of one row that would touch in DejaVu Sans.
func overlaps(row []svgLabel) []string {
	sort.Slice(row, func(i, j int) bool { return row[i].x < row[j].x })
	var out []string
	for i := 1; i < len(row); i++ {
		a, b := row[i-1], row[i]
		// A category label's trailing non-breaking spaces (padLabel) are
		// room left free, not ink.
		if end := a.x + dejaVuWidth(strings.TrimRight(a.text, "\u00a0"), a.size); end+2 > b.x {
			out = append(out, fmt.Sprintf("%q (x %.0f–%.0f) runs into %q (x %.0f)", a.text, a.x, end, b.text, b.x))
		}
	}
	return out
}

// barRun is a run of cells named like make bench's, with values v, the
// longest name as long as long (a strategy file's label).
func barRun(v []float64, long bool) *results.Run {
	run := &results.Run{}
	for i, x := range v {
		c := results.Cell{Broker: []string{"none", "rabbitmq", "kafka", "rocketmq"}[i%4], Strategy: "batch"}
		if long && i == 1 {
			c.Strategy = "file:inbox.sql@e3e26f46"
		}
		c.Throughput.EventsPerS, c.Latency.E2E.P99, c.Contention.LockWaitShare = x, int64(x), math.Min(x, 100)/100
		run.Cells = append(run.Cells, c)
	}
	return run
}

// TestBarAxisLabelsDoNotOverlap draws the summary's bar charts over seven
// decades of values (from 2: a bar of 0 µs, which no cell measures, labels
// itself "0µs" beside its name) and checks that no two labels of an axis would touch
// in a browser's fallback font (make bench's events/s axis drew "100,000"
// and "150,000" as one).
func TestBarAxisLabelsDoNotOverlap(t *testing.T) {
	r := makeBenchRun(t)
	var runs []*results.Run
	runs = append(runs, r.Run)
	for top := 10.0; top < 1e8; top *= 10 {
		for _, m := range []float64{1, 1.3, 2.2, 3.7, 4.6, 6.8, 9.4} {
			runs = append(runs, barRun([]float64{top * m, top * m / 5, top * m * 0.66, top * m / 2}, false),
				barRun([]float64{top * m / 3, top * m, top * m / 2}, true))
		}
	}
	for _, run := range runs {
		rc, err := buildCharts(run)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rc.Overview {
			for _, row := range labelRows(c.SVG) {
				for _, o := range overlaps(row) {
					t.Errorf("%s chart of %v: %s", c.ID, cellValues(run, c.ID), o)
				}
			}
		}
	}
}

// TestCategoryLabelsClearTheAxis: a bar chart's category labels, the
// cells' names, end before the value axis starts in the browser's
// fallback font, the longest name a strategy file's (the library
// right-aligns them by Roboto's widths: a service's name ran into the
// axis and its bar).
func TestCategoryLabelsClearTheAxis(t *testing.T) {
	// DejaVu Sans comes with fontconfig, which Chromium (make test-deps)
	// pulls in; measured here with the font itself.
	const dejaVuFile = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
	ttf, err := os.ReadFile(dejaVuFile)
	if err != nil {
		t.Fatalf("DejaVu Sans, the font a browser falls back to: %v (apt-get install fonts-dejavu-core)", err)
	}
	if err := charts.InstallFont("DejaVu Sans", ttf); err != nil {
		t.Fatal(err)
	}
	dejaVu := charts.GetFont("DejaVu Sans")
	p := newPainter(halfW, 300)
	for _, run := range []*results.Run{makeBenchRun(t).Run, barRun([]float64{1000, 50000, 20000}, true)} {
		rc, err := buildCharts(run)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rc.Overview {
			rows := labelRows(c.SVG)
			zero := math.Inf(1)
			for _, row := range rows {
				for _, l := range row {
					if l.text == "0" {
						zero = l.x
					}
				}
			}
			names := 0
			for _, row := range rows {
				for _, l := range row {
					name := strings.TrimRight(l.text, "\u00a0")
					if l.x >= zero || !strings.Contains(name, "/") {
						continue
					}
					names++
					w := p.MeasureText(name, 0, charts.FontStyle{FontSize: axisFont.FontSize, Font: dejaVu}).Width()
					if end := l.x + float64(w); end+2 > zero {
						t.Errorf("%s chart: %q ends at x %.0f, past the axis at %.0f", c.ID, name, end, zero)
					}
				}
			}
			if names != len(run.Cells) {
				t.Errorf("%s chart: found %d category labels left of the axis (at %.0f), want %d", c.ID, names, zero, len(run.Cells))
			}
		}
	}
}

func cellValues(run *results.Run, id string) []float64 {
	var v []float64
	for _, c := range run.Cells {
		if id == "e2e-p99" {
			v = append(v, float64(c.Latency.E2E.P99))
		} else {
			v = append(v, c.Throughput.EventsPerS)
		}
	}
	return v
}

// TestLatencyAxisInOneUnit: the e2e p99 axis reads its zero as "0" (not
// "0µs" beside ticks in seconds) and every other tick in the one unit
// its end needs.
func TestLatencyAxisInOneUnit(t *testing.T) {
	for _, tc := range []struct {
		p99  float64 // µs
		unit string
	}{
		{2_200_000, "s"}, {1_200_000, "s"}, {45_000, "ms"}, {1_000, "ms"}, {300, "µs"},
	} {
		rc, err := buildCharts(barRun([]float64{tc.p99, tc.p99 / 3}, false))
		if err != nil {
			t.Fatal(err)
		}
		var svg string
		for _, c := range rc.Overview {
			if c.ID == "e2e-p99" {
				svg = c.SVG
			}
		}
		ticks := axisRow(labelRows(svg))
		if len(ticks) < 2 || ticks[0] != "0" {
			t.Errorf("p99 %.0fµs: the axis's ticks are %q, want them to start at \"0\"", tc.p99, ticks)
			continue
		}
		for _, tick := range ticks[1:] {
			if n := strings.TrimSuffix(tick, tc.unit); n == tick || strings.ContainsAny(n, "µms") {
				t.Errorf("p99 %.0fµs: tick %q of %q is not in %s", tc.p99, tick, ticks, tc.unit)
			}
		}
	}
}

// axisRow is the texts of the row with the most labels: the value axis's
// ticks, left to right.
func axisRow(rows map[string][]svgLabel) []string {
	var best []svgLabel
	for _, row := range rows {
		if len(row) > len(best) {
			best = row
		}
	}
	sort.Slice(best, func(i, j int) bool { return best[i].x < best[j].x })
	var out []string
	for _, l := range best {
		out = append(out, l.text)
	}
	return out
}

// layoutProbe, appended to a copy of the report (its policy removed so
// that the script runs), writes into the DOM how wide each scrolling box
// is against the room it has, and the page against the window.
const layoutProbe = `<script>
addEventListener('load', () => {
  const out = [];
  document.querySelectorAll('.scroll').forEach(s => {
    const sec = s.closest('section');
    out.push((sec ? sec.id : '?') + ' ' + s.scrollWidth + ' ' + s.clientWidth);
  });
  out.push('page ' + document.documentElement.scrollWidth + ' ' + innerWidth);
  const p = document.createElement('pre'); p.id = 'layout-probe'; p.textContent = out.join('\n');
  document.body.appendChild(p);
});
</script>`

var probeRe = regexp.MustCompile(`(?s)<pre id="layout-probe">(.*?)</pre>`)

// TestReportFitsAt1280 lays make bench's report out in headless Chromium
// at 1280 px: no table may need its scroll bar (the summary's window
// column ran off the right edge), nor the page.
func TestReportFitsAt1280(t *testing.T) {
	bin := chromiumPath(t)
	dir := t.TempDir()
	page := string(render(t, HTML, makeBenchRun(t)))
	page = regexp.MustCompile(`<meta http-equiv="Content-Security-Policy"[^>]*>`).ReplaceAllString(page, "")
	page = strings.Replace(page, "</body>", layoutProbe+"</body>", 1)
	path := filepath.Join(dir, "report.html")
	writeFile(t, path, []byte(page))
	dom := string(runChromium(t, bin, filepath.Join(dir, "profile"), "--window-size=1280,4000", "--dump-dom", "file://"+path))
	m := probeRe.FindStringSubmatch(dom)
	if m == nil {
		t.Fatal("the layout probe did not run")
	}
	for _, line := range strings.Split(strings.TrimSpace(m[1]), "\n") {
		var box string
		var need, have int
		if _, err := fmt.Sscan(line, &box, &need, &have); err != nil {
			t.Fatalf("probe line %q: %v", line, err)
		}
		if need > have {
			t.Errorf("%s: %d px wide in %d px at a 1280 px window: cut off at the right edge", box, need, have)
		}
	}
}
