package render

import (
	_ "embed"
	"fmt"
	"html/template"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/schema"
)

// The site's pages: index.html and one page per trend, laid out by
// site.html.tmpl with the report's style sheet and chart figure
// (page.tmpl), so the site and the reports it links read as one thing.

//go:embed site.html.tmpl
var siteTemplate string

var siteTmpl = withPage(template.Must(template.New("site").Funcs(pageFuncs).Parse(siteTemplate)))

// indexView is index.html, already formatted.
type indexView struct {
	Title, Published string
	Facts            []string
	Runs             []indexRunView
	Trends           []trendLinkView
	NoTrend          string
	Skipped          []string
	SchemaVersion    int
	ResultSchema     string
	ConformSchema    string
}

// indexRunView is one run in the index: a benchmark run has one line
// per cell, a conformance run one line.
type indexRunView struct {
	Kind, ID, Href      string
	Date, DateTitle     string
	Workload, Hash      string
	TrendHref           string
	Matrix              string
	Verdict             verdictView
	VerdictTitle        string
	Cells               []indexCellView
	Conform             string
	Commit, CommitTitle string
	Durability          string
	DurabilityTitle     string
	Machine             string
	MachineTitle        string
	Files               []fileLink
	Span                int
}

type indexCellView struct {
	Name                     string
	Broken                   bool
	Rate, E2E, Dedup, Share  string
	Verdict                  verdictView
	RateTitle, E2ETitle      string
	DedupTitle, ShareTitle   string
	TrendHref, TrendAnchorID string
}

type fileLink struct{ Name, Href string }

type trendLinkView struct {
	Workload, Href string
	Cells          int
	Runs           int
	Breaks         int
	Latest         string
}

func newIndexView(runs []*siteRun, trends []*trendPage, skipped []string, now time.Time) *indexView {
	v := &indexView{Title: "inboxbench results", Published: now.UTC().Format("2006-01-02 15:04 UTC"), Skipped: skipped,
		SchemaVersion: results.SchemaVersion, ResultSchema: "schema/" + schema.Result, ConformSchema: "schema/" + schema.Conform}
	trendOf := map[string]*trendPage{}
	for _, t := range trends {
		trendOf[t.Workload] = t
	}
	var bench, conf int
	for _, r := range runs {
		if r.Run != nil {
			bench++
			v.Runs = append(v.Runs, benchRow(r, trendOf))
		}
		if r.Conform != nil {
			conf++
			v.Runs = append(v.Runs, conformRow(r))
		}
	}
	v.Facts = append(v.Facts, plural(bench, "benchmark run"), plural(conf, "conformance run"),
		plural(len(trends), "trend page"), "published "+v.Published)
	for _, t := range trends {
		tl := trendLinkView{Workload: t.Workload, Href: t.Path(), Cells: len(t.Cells), Runs: len(t.Runs),
			Latest: t.Runs[len(t.Runs)-1].StartedAt.UTC().Format("2006-01-02 15:04")}
		for _, c := range t.Cells {
			tl.Breaks += len(c.Series) - 1
		}
		v.Trends = append(v.Trends, tl)
	}
	if len(trends) == 0 {
		v.NoTrend = "No cell recurs yet: a trend needs the same broker/strategy in two runs of one workload."
	}
	return v
}

// plural counts things: "1 trend page", "2 trend pages".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func runHref(r *siteRun) string { return "runs/" + r.ID + "/report.html" }

// runCommon fills what benchmark and conformance rows share.
func runCommon(r *siteRun, kind string) indexRunView {
	e := r.env()
	row := indexRunView{Kind: kind, ID: r.ID, Href: runHref(r), Date: "-", Span: 1,
		Commit: shortCommit(e.GitCommit), CommitTitle: e.GitCommit,
		Durability: results.DurabilityText(e.Durability), DurabilityTitle: durabilitySettings(e.Durability)}
	if t := r.Started(); !t.IsZero() {
		row.Date, row.DateTitle = t.UTC().Format("2006-01-02 15:04"), t.UTC().Format(time.RFC3339)
	}
	if e.Cores > 0 {
		row.Machine = fmt.Sprintf("%d cores · %.0f GiB", e.Cores, float64(e.MemoryMiB)/1024)
	}
	row.MachineTitle = strings.Join(nonEmpty(e.OS, e.Postgres, e.Hostname), " · ")
	for _, name := range runFiles {
		if name == "report.html" || !exists(filepath.Join(r.Src, name)) {
			continue
		}
		row.Files = append(row.Files, fileLink{name, "runs/" + r.ID + "/" + name})
	}
	return row
}

func benchRow(r *siteRun, trendOf map[string]*trendPage) indexRunView {
	run := r.Run
	row := runCommon(r, "benchmark")
	row.Workload = run.WorkloadName()
	row.Hash = "workload sha256 " + results.ShortHash(results.WorkloadHash(run.Workload))
	t := trendOf[row.Workload]
	if t != nil {
		row.TrendHref = t.Path()
	}
	row.Matrix = matrixText(cellAxes(run.Cells))
	ok, text := run.RunVerdict()
	row.Verdict, row.VerdictTitle = verdictView{Text: string(results.VerdictPass), Class: "pass"}, text
	if !ok {
		row.Verdict.Text, row.Verdict.Class = string(results.VerdictFail), "fail"
	}
	for i := range run.Cells {
		c := &run.Cells[i]
		l := &c.Latency
		cv := indexCellView{Name: c.Name(), Broken: c.Broken, Rate: results.FormatRate(c.Throughput.EventsPerS),
			E2E: latencyCell(l.E2E, l.E2E.P99), Dedup: latencyCell(l.Dedup, l.Dedup.P99),
			Share: results.FormatShare(c.Contention.LockWaitShare), Verdict: cellVerdict(c)}
		if c.Contention.Samples == 0 {
			cv.Share = "—"
		}
		if c.Error != "" {
			cv.Rate = "—"
		}
		if t != nil && t.HasCell(c) {
			cv.TrendHref = t.Path() + "#" + cellAnchor(c.Broker+"/"+c.StrategyKey())
		}
		row.Cells = append(row.Cells, cv)
	}
	row.Span = max(1, len(row.Cells))
	return row
}

func conformRow(r *siteRun) indexRunView {
	c := r.Conform
	row := runCommon(r, "conformance")
	var brokers, strategies, scenarios []string
	for _, x := range c.Rows {
		brokers = appendNew(brokers, x.Broker)
		strategies = appendNew(strategies, x.Strategy)
		scenarios = appendNew(scenarios, x.Scenario)
	}
	row.Workload = "-"
	row.Matrix = matrixText(brokers, strategies)
	s := results.Summarize(c.Rows)
	row.Verdict = verdictView{Text: string(s.Verdict), Class: strings.ToLower(string(s.Verdict))}
	row.VerdictTitle = fmt.Sprintf("%d of %d rows as expected", s.AsExpected, s.Rows)
	row.Conform = fmt.Sprintf("%d scenarios (%s): %d of %d rows as expected; %s", len(scenarios), strings.Join(scenarios, ", "),
		s.AsExpected, s.Rows, mutationText(s))
	return row
}

// cellAxes lists the brokers and strategies of a run in first-seen order.
func cellAxes(cells []results.Cell) (brokers, strategies []string) {
	for _, c := range cells {
		brokers = appendNew(brokers, c.Broker)
		strategies = appendNew(strategies, c.Strategy)
	}
	return brokers, strategies
}

func matrixText(brokers, strategies []string) string {
	if len(brokers) == 0 {
		return "-"
	}
	return strings.Join(brokers, ", ") + " × " + strings.Join(strategies, ", ")
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// shortCommit cuts a commit id to 10 hex digits, keeping a -dirty mark.
func shortCommit(c string) string {
	if c == "" {
		return "-"
	}
	head, dirty := strings.CutSuffix(c, "-dirty")
	if len(head) > 10 {
		head = head[:10]
	}
	if dirty {
		head += "-dirty"
	}
	return head
}

// cellAnchor is a cell's fragment id on its trend page.
func cellAnchor(name string) string { return "cell-" + safeName(strings.ReplaceAll(name, "/", "--")) }

// trendView is one trend page.
type trendView struct {
	Title     string
	Threshold string // the change a change point must exceed
	Facts     []string
	Intro     string
	Cells     []trendCellView
	Single    string
	IndexHref string
}

type trendCellView struct {
	Name, Anchor string
	Charts       []*chart
	Series       []trendSeriesView
	Points       []trendPointView
	// Changes are the change points of every metric, oldest first; a
	// flat history has none.
	Changes []trendChangeView
}

// trendChangeView is one change point: the metric, the first run after
// it, and the change with its evidence.
type trendChangeView struct {
	Metric, RunID, Href, Date, Text string
	Suspect                         bool
	point                           int
}

type trendSeriesView struct {
	Label, Reason, From, To string
	Count                   int
	Workload, Class         string
	Changes                 []string
}

type trendPointView struct {
	RunID, Href, Date, Commit, Series string
	Rate, E2E, Dedup, Share           string
	Verdict                           verdictView
	// Change names the metrics with a change point at this run.
	Change string
}

func newTrendView(t *trendPage) (*trendView, error) {
	v := &trendView{Title: "Trend: workload " + t.Workload, IndexHref: "../index.html", Threshold: fmt.Sprintf("%.0f%%", 100*t.threshold),
		Facts: []string{plural(len(t.Runs), "run"), plural(len(t.Cells), "recurring cell"),
			"from " + longTime(t.site[t.Runs[0]]), "to " + longTime(t.site[t.Runs[len(t.Runs)-1]])}}
	if len(t.Single) > 0 {
		sort.Strings(t.Single)
		v.Single = "Ran in one run only, so no trend yet: " + strings.Join(t.Single, ", ") + "."
	}
	for ci, ct := range t.Cells {
		cv := trendCellView{Name: ct.Name, Anchor: cellAnchor(ct.Name)}
		// Each metric's change points, found once for its chart and the
		// table.
		changes := make([][]results.TrendChange, len(trendMetrics))
		for mi, m := range trendMetrics {
			changes[mi] = m.changes(ct, t.threshold)
			c, err := trendChart(ct, m, fmt.Sprintf("trend-%d-%s", ci, m.ID), t.site, changes[mi], t.threshold)
			if err != nil {
				return nil, err
			}
			cv.Charts = append(cv.Charts, c)
		}
		cv.Series = seriesViews(ct, t.site)
		changed := map[int][]string{}
		for mi, m := range trendMetrics {
			for _, c := range changes[mi] {
				r := t.site[ct.Points[c.Point].Run]
				cv.Changes = append(cv.Changes, trendChangeView{Metric: m.Title, RunID: r.ID, Href: "../" + runHref(r), Date: longTime(r),
					Text: changeText(c), Suspect: c.Suspect, point: c.Point})
				name := m.Title
				if c.Suspect {
					name += " (suspect)"
				}
				changed[c.Point] = append(changed[c.Point], name)
			}
		}
		sort.SliceStable(cv.Changes, func(i, j int) bool { return cv.Changes[i].point < cv.Changes[j].point })
		for i, p := range ct.Points {
			l := &p.Cell.Latency
			r := t.site[p.Run]
			cv.Points = append(cv.Points, trendPointView{RunID: r.ID, Href: "../" + runHref(r), Date: longTime(r),
				Commit: shortCommit(p.Run.Env.GitCommit), Series: fmt.Sprintf("[%d]", p.Series+1),
				Rate: trendRate(p.Cell), E2E: latencyCell(l.E2E, l.E2E.P99), Dedup: latencyCell(l.Dedup, l.Dedup.P99),
				Share: results.FormatShare(p.Cell.Contention.LockWaitShare), Verdict: cellVerdict(p.Cell), Change: strings.Join(changed[i], ", ")})
		}
		v.Cells = append(v.Cells, cv)
	}
	return v, nil
}

// trendRate is a point's events/s with its interval over the run's
// rounds ("81,204 [79,010–83,500]").
func trendRate(c *results.Cell) string {
	if st := c.Stats; st != nil && st.EventsPerS.N > 1 {
		return results.IntervalText(st.EventsPerS, results.FormatRate)
	}
	return results.FormatRate(c.Throughput.EventsPerS)
}

func seriesViews(ct *results.CellTrend, site map[*results.Run]*siteRun) []trendSeriesView {
	out := make([]trendSeriesView, len(ct.Series))
	for i, s := range ct.Series {
		out[i] = trendSeriesView{Label: fmt.Sprintf("[%d]", i+1), Reason: s.Reason, Count: s.Count,
			Workload: results.ShortHash(s.Workload), Class: s.Class.Describe(), Changes: s.Changes}
		if i == 0 {
			out[i].Reason = "first runs"
		}
	}
	for _, p := range ct.Points {
		sv := &out[p.Series]
		if sv.From == "" {
			sv.From = longTime(site[p.Run])
		}
		sv.To = longTime(site[p.Run])
	}
	return out
}

// trendPage is a trend (results.Trends) as the site shows it: a page of
// its own, whose points link to the runs' pages.
type trendPage struct {
	*results.Trend
	Slug string
	site map[*results.Run]*siteRun // the site's run of each point
	// threshold is the smallest relative change marked as a change point.
	threshold float64
}

// Path is the page's path inside the site.
func (t *trendPage) Path() string { return "trends/" + t.Slug + ".html" }

// buildTrends follows the benchmark runs' cells over time, one page per
// workload name, marking changes beyond threshold.
func buildTrends(runs []*siteRun, threshold float64) []*trendPage {
	site := map[*results.Run]*siteRun{}
	var oldest []*results.Run
	for i := len(runs) - 1; i >= 0; i-- { // runs are newest first
		if r := runs[i]; r.Run != nil {
			site[r.Run] = r
			oldest = append(oldest, r.Run)
		}
	}
	var out []*trendPage
	slugs := map[string]int{}
	for _, t := range results.Trends(oldest) {
		p := &trendPage{Trend: t, Slug: safeName(t.Workload), site: site, threshold: threshold}
		if slugs[p.Slug]++; slugs[p.Slug] > 1 {
			p.Slug = fmt.Sprintf("%s-%d", p.Slug, slugs[p.Slug])
		}
		out = append(out, p)
	}
	return out
}

// durabilitySettings lists the recorded settings, "component.setting=value".
func durabilitySettings(d *results.Durability) string {
	if d == nil {
		return ""
	}
	var out []string
	for _, comp := range sortedKeys(d.Settings) {
		for _, k := range sortedKeys(d.Settings[comp]) {
			out = append(out, comp+"."+k+"="+d.Settings[comp][k])
		}
	}
	return strings.Join(out, ", ")
}
