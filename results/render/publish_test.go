package render

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// fixtureVariant writes testdata/result.json into dir/name/result.json
// with another run id and start time, after edit changes its JSON.
func fixtureVariant(t *testing.T, dir, name string, start time.Time, edit func(m map[string]any)) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustReadFile(t, filepath.Join(testdata, "result.json")), &m); err != nil {
		t.Fatal(err)
	}
	m["run_id"] = name
	m["started_at"] = start.Format(time.RFC3339)
	m["finished_at"] = start.Add(time.Minute).Format(time.RFC3339)
	if edit != nil {
		edit(m)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, name, "result.json"), b)
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)

// resultsTree builds a results directory as a nightly job leaves it:
// three runs of one workload on one machine, then one on a bigger machine,
// then one of a changed workload; a conformance run; a run that already
// has its report; a file that is not a result.
func resultsTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	fixtureVariant(t, dir, "night-1", t0, nil)
	fixtureVariant(t, dir, "night-2", t0.Add(24*time.Hour), func(m map[string]any) {
		// Another Kafka version: the rabbitmq cells keep their line.
		m["env"].(map[string]any)["brokers"].(map[string]any)["kafka"] = "4.1.0"
	})
	fixtureVariant(t, dir, "night-3", t0.Add(48*time.Hour), nil)
	fixtureVariant(t, dir, "night-4", t0.Add(72*time.Hour), func(m map[string]any) {
		m["env"].(map[string]any)["cores"] = 16
	})
	fixtureVariant(t, dir, "sub/night-5", t0.Add(96*time.Hour), func(m map[string]any) {
		m["env"].(map[string]any)["cores"] = 16
		m["workload"].(map[string]any)["events"] = 9000
		m["env"].(map[string]any)["durability"] = map[string]any{"profile": "fsync",
			"settings": map[string]any{"postgres": map[string]any{"synchronous_commit": "on"}}}
	})
	writeFile(t, filepath.Join(dir, "conf", results.ConformFile), mustReadFile(t, filepath.Join(testdata, results.ConformFile)))
	writeFile(t, filepath.Join(dir, "night-3", "report.html"), []byte("<!DOCTYPE html><title>kept</title><p>the report as it was</p>"))
	writeFile(t, filepath.Join(dir, "broken", "result.json"), []byte("{"))
	// A Go package's test fixtures (the results directory of a checkout
	// holds this package's): not runs.
	writeFile(t, filepath.Join(dir, "pkg", "testdata", results.ConformFile), mustReadFile(t, filepath.Join(testdata, results.ConformFile)))
	return dir
}

func TestPublishSite(t *testing.T) {
	src := resultsTree(t)
	before := listFiles(t, src)
	out := filepath.Join(t.TempDir(), "site")
	pub, err := Publish(PublishOptions{Dirs: []string{src}, Out: out, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if pub.Benchmarks != 5 || pub.Conforms != 1 || len(pub.Trends) != 1 || len(pub.Skipped) != 1 {
		t.Fatalf("published %+v", pub)
	}
	if after := listFiles(t, src); after != before {
		t.Errorf("publish wrote into the results directory:\nbefore %s\nafter  %s", before, after)
	}
	index := string(mustReadFile(t, filepath.Join(out, "index.html")))
	for _, want := range []string{"night-1", "night-2", "night-3", "night-4", "night-5", "20250101-120000-fixture", "durability fsync",
		"durability -", "kafka, rabbitmq × tx, broken-split", "mutation score 2/2", "abc1234", "not a result.json", "schema/result.schema.json"} {
		if !strings.Contains(index, want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	// Newest first.
	if strings.Index(index, "night-5") > strings.Index(index, "night-1") {
		t.Error("index.html does not list the newest run first")
	}
	if got := string(mustReadFile(t, filepath.Join(out, "runs", "night-3", "report.html"))); !strings.Contains(got, "the report as it was") {
		t.Error("an existing report.html was not published as it was")
	}
	if got := string(mustReadFile(t, filepath.Join(out, "runs", "night-1", "report.html"))); !strings.Contains(got, "inboxbench report: night-1") {
		t.Error("a run without report.html got none in the site")
	}
	for _, f := range []string{"schema/result.schema.json", "schema/conform.schema.json", "runs/night-1/result.json", "runs/20250101-120000-fixture/conform.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("site lacks %s", f)
		}
	}
	checkLinks(t, out)

	// Copied elsewhere, every link still resolves.
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.CopyFS(moved, os.DirFS(out)); err != nil {
		t.Fatal(err)
	}
	checkLinks(t, moved)

	// A site inside the results directory is not searched: its copies of
	// the runs would be published twice.
	inner := filepath.Join(src, "site")
	if _, err := Publish(PublishOptions{Dirs: []string{src}, Out: inner, Now: t0}); err != nil {
		t.Fatal(err)
	}
	again, err := Publish(PublishOptions{Dirs: []string{src}, Out: filepath.Join(t.TempDir(), "site2"), Now: t0})
	if err != nil || again.Benchmarks != 5 {
		t.Errorf("publishing a results directory that holds a site: %+v, %v", again, err)
	}

	// A second publish replaces the first.
	if _, err := Publish(PublishOptions{Dirs: []string{filepath.Join(src, "night-1"), filepath.Join(src, "night-2")}, Out: out, Now: t0}); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "runs", "night-4")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a republished site keeps the pages of runs no longer published")
	}
}

func listFiles(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, " ")
}

var hrefRe = regexp.MustCompile(`(?:href|src)="([^"]*)"`)

// checkLinks opens every page of the site and requires each link to be
// relative and to name a file of the site.
func checkLinks(t *testing.T, site string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(site, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".html") {
			return err
		}
		page, _ := os.ReadFile(p)
		for _, m := range hrefRe.FindAllStringSubmatch(string(page), -1) {
			link := strings.ReplaceAll(m[1], "&amp;", "&")
			if strings.HasPrefix(link, "#") {
				continue
			}
			u, err := url.Parse(link)
			if err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(u.Path, "/") {
				t.Errorf("%s: link %q is not relative to the site", p, link)
				continue
			}
			target := filepath.Join(filepath.Dir(p), filepath.FromSlash(u.Path))
			if rel, err := filepath.Rel(site, target); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: link %q leaves the site", p, link)
			} else if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %q names no file of the site", p, link)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Errorf("only %d links checked in %s", n, site)
	}
}

var (
	svgLinkRe = regexp.MustCompile(`<a href="(\.\./runs/[^"]+/report\.html)"><title>[^<]+</title><circle `)
	breakRe   = regexp.MustCompile(`<g class="series-break">`)
)

// TestPublishTrends checks the trend page of resultsTree: each recurring
// cell's lines break where the machine class or the workload changed, and
// nowhere else; every point links to its run.
func TestPublishTrends(t *testing.T) {
	out := filepath.Join(t.TempDir(), "site")
	if _, err := Publish(PublishOptions{Dirs: []string{resultsTree(t)}, Out: out, Now: t0}); err != nil {
		t.Fatal(err)
	}
	page := string(mustReadFile(t, filepath.Join(out, "trends", "contention.html")))
	sections := strings.Split(page, `<section id="cell-`)[1:]
	if len(sections) != 4 {
		t.Fatalf("trend page has %d cell sections, want 4", len(sections))
	}
	for _, sec := range sections {
		name := sec[:strings.Index(sec, `"`)]
		events := sec[strings.Index(sec, `data-chart="trend-`):]
		events = events[:strings.Index(events, "</figure>")]
		links := svgLinkRe.FindAllStringSubmatch(events, -1)
		if len(links) != 5 {
			t.Errorf("%s: events/s chart links %d points, want 5 (one per run)", name, len(links))
		}
		// rabbitmq cells: a new line for 16 cores, another for the
		// workload; kafka cells also one for the Kafka upgrade in night-2
		// (night-3, back on 4.0.0, belongs to the first line again).
		want := 2
		if strings.HasPrefix(name, "kafka") {
			want = 3
		}
		if got := len(breakRe.FindAllString(events, -1)); got != want {
			t.Errorf("%s: %d series breaks drawn, want %d", name, got, want)
		}
		for _, w := range []string{"cores: 8 → 16", "events: 5000 → 9000", "durability: - → fsync"} {
			if !strings.Contains(sec, w) {
				t.Errorf("%s: the series table does not say %q", name, w)
			}
		}
	}
	if !strings.Contains(page, "broker: kafka 4.0.0 → kafka 4.1.0") {
		t.Error("the kafka cells do not say the broker version changed")
	}
}

func TestPublishRefuses(t *testing.T) {
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "notes.txt"), []byte("no runs here"))
	site := filepath.Join(t.TempDir(), "site")
	notSite := t.TempDir()
	writeFile(t, filepath.Join(notSite, "keep.txt"), []byte("mine"))
	src := resultsTree(t)
	for _, tc := range []struct {
		name string
		opt  PublishOptions
		want string
	}{
		{"no runs", PublishOptions{Dirs: []string{empty}, Out: site}, "holds no runs"},
		{"one of two dirs has no runs", PublishOptions{Dirs: []string{src, empty}, Out: site}, "holds no runs"},
		{"only unreadable runs", PublishOptions{Dirs: []string{filepath.Join(src, "broken")}, Out: site}, "unreadable"},
		{"missing dir", PublishOptions{Dirs: []string{filepath.Join(empty, "nope")}, Out: site}, "no such file"},
		{"a file", PublishOptions{Dirs: []string{filepath.Join(empty, "notes.txt")}, Out: site}, "not a directory"},
		{"out is the results dir", PublishOptions{Dirs: []string{src}, Out: src}, "results directory itself"},
		{"out holds other files", PublishOptions{Dirs: []string{src}, Out: notSite}, "not a site bench publish wrote"},
		{"no dirs", PublishOptions{Out: site}, "at least one"},
	} {
		_, err := Publish(tc.opt)
		if !errors.Is(err, ErrPublishUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a usage error saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := os.Stat(site); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a refused publish created the site directory")
	}
	if b := mustReadFile(t, filepath.Join(notSite, "keep.txt")); string(b) != "mine" {
		t.Error("a refused publish touched a directory that is not a site")
	}
}

// TestTrendChartLinksEveryPoint keeps linkPoints in step with how the
// chart library draws points: isolated points, gaps and one-point lines
// included.
func TestTrendChartLinksEveryPoint(t *testing.T) {
	site := map[*results.Run]*siteRun{}
	r := func(id string, day int) *results.Run {
		run := &results.Run{StartedAt: t0.Add(time.Duration(day) * 24 * time.Hour)}
		site[run] = &siteRun{ID: id, Run: run}
		return run
	}
	cell := func(rate float64) *results.Cell {
		return &results.Cell{Throughput: results.Throughput{EventsPerS: rate}}
	}
	ct := &results.CellTrend{Name: "kafka/tx", Series: []*results.TrendSeries{{}, {Reason: "environment changed"}, {Reason: "workload changed"}},
		Points: []results.TrendPoint{{Run: r("a", 0), Cell: cell(100)}, {Run: r("b", 1), Cell: cell(0)}, {Run: r("c", 2), Cell: cell(120)},
			{Run: r("d", 3), Cell: cell(90), Series: 1}, {Run: r("e", 4), Cell: cell(95)}, {Run: r("f", 5), Cell: cell(80), Series: 2}}}
	c, err := trendChart(ct, trendMetrics[0], "x", site, trendMetrics[0].changes(ct, TrendThreshold), TrendThreshold)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range svgLinkRe.FindAllStringSubmatch(c.SVG, -1) {
		got = append(got, m[1])
	}
	want := "../runs/a/report.html ../runs/c/report.html ../runs/e/report.html ../runs/d/report.html ../runs/f/report.html"
	if strings.Join(got, " ") != want {
		t.Errorf("linked points %v, want %s (b has no throughput)", got, want)
	}
	if n := len(breakRe.FindAllString(c.SVG, -1)); n != 2 {
		t.Errorf("%d break markers, want 2", n)
	}
	for _, w := range []string{"[2] environment changed", "[3] workload changed"} {
		if !strings.Contains(c.SVG, w) {
			t.Errorf("legend lacks %q", w)
		}
	}
}
