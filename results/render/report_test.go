package render

import (
	"bytes"
	"context"
	"errors"
	"html"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/internal/testenv/golden"
	"github.com/inboxbench/inboxbench/results"
)

// testdata holds the fixtures of package results, which its writers'
// tests render.
var testdata = filepath.Join("..", "testdata")

func loadFixture(t *testing.T, dir string) *results.Report {
	t.Helper()
	r, err := results.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func render(t *testing.T, enc Encoder, r *results.Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := enc(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestMarkdownGolden(t *testing.T) {
	r := loadFixture(t, testdata)
	if r.Run == nil || r.Conform == nil {
		t.Fatal("fixture should hold both result.json and conform.json")
	}
	golden.Check(t, filepath.Join(testdata, "report.golden.md"), render(t, Markdown, r))
}

func TestMarkdownConformOnlyGolden(t *testing.T) {
	r := loadFixture(t, filepath.Join(testdata, "conform-only"))
	if r.Run != nil {
		t.Fatal("conform-only fixture has a result.json")
	}
	golden.Check(t, filepath.Join(testdata, "report.conform-only.golden.md"), render(t, Markdown, r))
}

func TestMarkdownSaysWhatIsExpected(t *testing.T) {
	md := string(render(t, Markdown, loadFixture(t, testdata)))
	for _, want := range []string{
		"broken-split (negative control)",
		"expected FAIL, got FAIL",
		"**Verdict: PASS",
		"inbox-without-effect",
		"mutation score 2/2",
		"| kafka | tx | 200 | - | broker publish | - | 2.41ms | 12.5ms |",
		`evt-000417 \| acct-17 v4`, // pipes inside examples stay in their cell
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	paths, err := WriteFiles(dir, loadFixture(t, testdata), Outputs(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.md", "report.html", "cells.csv", "series.csv"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s not written (%v)", name, err)
		}
	}
	if len(paths) != 4 {
		t.Errorf("paths = %v", paths)
	}
	paths, err = WriteFiles(t.TempDir(), loadFixture(t, testdata), Outputs(false))
	if err != nil || len(paths) != 2 {
		t.Errorf("without CSV: %v %v", paths, err)
	}
}

// networkRef finds anything a browser would fetch: scripts, stylesheets,
// fonts, images, imports. The SVG namespace URI is an identifier, not a
// fetch, and is the only URL allowed.
var networkRef = regexp.MustCompile(`(?i)<script|<link|<img|<iframe|@import|url\(|\bsrc=|https?://`)

func TestHTMLSelfContained(t *testing.T) {
	r := loadFixture(t, testdata)
	page := string(render(t, HTML, r))
	stripped := strings.ReplaceAll(page, "http://www.w3.org/2000/svg", "")
	stripped = strings.ReplaceAll(stripped, "http://www.w3.org/1999/xlink", "")
	if m := networkRef.FindString(stripped); m != "" {
		i := strings.Index(stripped, m)
		t.Fatalf("report.html references something outside the file (%q) near: %s", m, stripped[max(0, i-80):min(len(stripped), i+80)])
	}
	rc, err := buildCharts(r.Run)
	if err != nil {
		t.Fatal(err)
	}
	charts := rc.all()
	// 2 overview bars, throughput, e2e spectrum, dedup + apply spectra,
	// lock-share bar, 4 contention charts, counters.
	if len(charts) != 12 {
		t.Errorf("built %d charts, want 12", len(charts))
	}
	for _, c := range charts {
		if !strings.Contains(page, `data-chart="`+c.ID+`"`) {
			t.Errorf("chart %s missing from the page", c.ID)
		}
	}
	for _, want := range []string{"expected FAIL, got FAIL", "(negative control)", `class="v pass"`, `class="v caught"`,
		"Conformance matrix", "PASS (expected FAIL)", "Lock/transactionid", "workloads/contention.yaml", "p99.9"} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
}

func TestHTMLConformOnly(t *testing.T) {
	page := string(render(t, HTML, loadFixture(t, filepath.Join(testdata, "conform-only"))))
	if strings.Contains(page, `<figure class="chart`) {
		t.Error("a conform-only report has no run charts")
	}
	for _, want := range []string{"Conformance matrix", "mutation score 2/2", "consumer-crash"} {
		if !strings.Contains(page, want) {
			t.Errorf("conform-only report.html lacks %q", want)
		}
	}
}

// chromiumPath finds the browser; CI installs Debian's chromium package,
// so a missing browser fails the test instead of skipping it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("INBOXBENCH_CHROMIUM"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("headless Chromium not found at /usr/bin/chromium: install the Debian package with 'apt-get install -y chromium' " +
		"(make test and CI install it), or point INBOXBENCH_CHROMIUM at a Chromium binary")
	return ""
}

func runChromium(t *testing.T, bin, profile string, args ...string) []byte {
	t.Helper()
	out, _ := chromiumOutput(t, bin, profile, args...)
	return out
}

// chromiumOutput runs headless Chromium and returns what it printed on
// stdout (the DOM, with --dump-dom) and stderr (its log, where the page's
// console messages go with --enable-logging=stderr).
func chromiumOutput(t *testing.T, bin, profile string, args ...string) (stdout, stderr []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + profile}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	cmd.Env = append(os.Environ(), "HOME="+profile)
	out, err := cmd.Output()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("chromium %v did not finish within 60s; stderr:\n%s", args, tail(errBuf.String(), 2000))
	}
	if err != nil {
		t.Fatalf("chromium %v: %v; stderr:\n%s", args, err, tail(errBuf.String(), 2000))
	}
	return out, errBuf.Bytes()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

var (
	figureRe = regexp.MustCompile(`(?s)<figure class="chart[^"]*"[^>]*data-chart="([^"]+)"[^>]*>(.*?)</figure>`)
	drawRe   = regexp.MustCompile(`<(path|rect|circle|polyline|polygon|line)\b`)
	textRe   = regexp.MustCompile(`<text\b[^>]*>[^<]+</text>`)
)

// TestHTMLInChromium opens report.html from disk in headless Chromium,
// checks from the DOM Chromium built that every chart rendered drawing
// elements and labels, and takes a screenshot.
func TestHTMLInChromium(t *testing.T) {
	bin := chromiumPath(t)
	dir := t.TempDir()
	r := loadFixture(t, testdata)
	if _, err := WriteFiles(dir, r, Outputs(false)); err != nil {
		t.Fatal(err)
	}
	url := "file://" + filepath.Join(dir, "report.html")

	dom := string(runChromium(t, bin, filepath.Join(dir, "profile-dom"), "--dump-dom", url))
	rc, err := buildCharts(r.Run)
	if err != nil {
		t.Fatal(err)
	}
	figures := figureRe.FindAllStringSubmatch(dom, -1)
	if len(figures) != len(rc.all()) {
		t.Fatalf("Chromium's DOM has %d chart figures, the report built %d", len(figures), len(rc.all()))
	}
	for _, f := range figures {
		id, body := f[1], f[2]
		if !strings.Contains(body, "<svg") {
			t.Errorf("chart %s: no <svg> in the DOM", id)
			continue
		}
		draw, text := len(drawRe.FindAllString(body, -1)), len(textRe.FindAllString(body, -1))
		if draw == 0 || text == 0 {
			t.Errorf("chart %s rendered %d drawing elements and %d labels; want both > 0", id, draw, text)
		}
	}
	if !strings.Contains(dom, "expected FAIL, got FAIL") {
		t.Error("Chromium's DOM lacks the negative-control verdict")
	}

	shot := filepath.Join(dir, "report.png")
	runChromium(t, bin, filepath.Join(dir, "profile-shot"), "--screenshot="+shot, "--window-size=1400,4000", "--hide-scrollbars", url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	st, _ := f.Stat()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s is not a PNG: %v", shot, err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 3000 {
		t.Errorf("screenshot is %v, want about 1400×4000", b)
	}
	// A blank page compresses to almost nothing and has one colour; a
	// rendered report has many.
	colours := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if st.Size() < 50_000 || len(colours) < 50 {
		t.Errorf("screenshot looks blank: %d bytes, %d distinct colours", st.Size(), len(colours))
	}
	t.Logf("screenshot: %s (%d bytes, %d colours sampled)", shot, st.Size(), len(colours))
}

// TestSparseRuns renders runs with missing pieces: no cells; a cell that
// errored before measuring anything; a cell with summaries but no
// spectrum or series (older or partial result.json files).
func TestSparseRuns(t *testing.T) {
	summaryOnly := results.Cell{Broker: "kafka", Strategy: "cte", Invariants: results.Invariants{Verdict: results.VerdictPass},
		Throughput: results.Throughput{EventsPerS: 50},
		Latency:    results.Latencies{E2E: results.Summary{Count: 10, P50: 800, P90: 900, P99: 1200, P999: 1500, Max: 2000}},
		Contention: results.Contention{Samples: 3}}
	for name, run := range map[string]*results.Run{
		"no cells":     {SchemaVersion: results.SchemaVersion, RunID: "empty"},
		"errored cell": {SchemaVersion: results.SchemaVersion, RunID: "err", Cells: []results.Cell{{Broker: "rocketmq", Strategy: "tx", Error: "broker unreachable"}}},
		"summary only": {SchemaVersion: results.SchemaVersion, RunID: "old", Cells: []results.Cell{summaryOnly}},
	} {
		t.Run(name, func(t *testing.T) {
			r := &results.Report{Run: run}
			md := string(render(t, Markdown, r))
			page := string(render(t, HTML, r))
			render(t, CellsCSV, r)
			render(t, SeriesCSV, r)
			switch name {
			case "errored cell":
				if !strings.Contains(md, "broker unreachable") || !strings.Contains(page, "broker unreachable") || !strings.Contains(md, "**Verdict: FAIL") {
					t.Error("the cell's error is not reported as a failure")
				}
			case "summary only":
				if !strings.Contains(page, "drawn from the summary percentiles only") {
					t.Error("a spectrum drawn from summary percentiles is not labelled as such")
				}
			}
		})
	}
}

func TestCalibrationOnlyReport(t *testing.T) {
	r := loadFixture(t, filepath.Join(testdata, "calibrate-only"))
	if r.Run != nil || r.Conform != nil || r.Calibration == nil {
		t.Fatal("calibrate-only fixture should hold calibrate.json alone")
	}
	md := render(t, Markdown, r)
	golden.Check(t, filepath.Join(testdata, "report.calibrate-only.golden.md"), md)
	page := string(render(t, HTML, r))
	for _, want := range []string{"Client calibration", "publish ratio", "org.apache.kafka.tools.ProducerPerformance", "com.rabbitmq.perf.PerfTest", "benchmark.Consumer"} {
		if !strings.Contains(page, want) || !strings.Contains(string(md), want) {
			t.Errorf("calibration report lacks %q (md or html)", want)
		}
	}
	if strings.Contains(page, `id="environment"`) {
		t.Error("a calibration-only report has no run environment section")
	}
}

func TestDurabilityTable(t *testing.T) {
	r := loadFixture(t, testdata)
	r.Run.Env.Durability = &results.Durability{Profile: "stock"}
	r.Run.Env.AddDurability("kafka", map[string]string{"acks": "all (client: leader waits for the in-sync replicas)", "replication.factor": "1",
		"flush.messages": "9223372036854775807 (never)", "fsync before confirm": "no: acknowledged once in the page cache of the in-sync replicas"})
	r.Run.Env.AddDurability("postgres", map[string]string{"fsync": "on", "synchronous_commit": "on", "wal_sync_method": "fdatasync",
		"fsync before confirm": "yes: COMMIT returns after its WAL was flushed (fdatasync)"})
	md := string(render(t, Markdown, r))
	page := string(render(t, HTML, r))
	for _, want := range []string{"## Durability", "Stack durability profile: stock", "| postgres | yes: COMMIT returns after its WAL was flushed (fdatasync) |", "| kafka | no: acknowledged once in the page cache"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	// PostgreSQL's row comes first, whatever the broker names.
	if strings.Index(md, "| postgres | yes") > strings.Index(md, "| kafka | no") {
		t.Error("the durability table does not start with postgres")
	}
	if !strings.Contains(page, `id="durability"`) || !strings.Contains(page, "synchronous_commit=on") {
		t.Error("report.html lacks the durability table")
	}
}

// TestCellNotesRendered: a cell's notes (the client calibration cited for
// a cell bound by the broker's publish path) appear in both reports.
func TestCellNotesRendered(t *testing.T) {
	r := loadFixture(t, testdata)
	r.Run.Cells[0].Notes = []string{"bound by the broker's publish path: the client calibration measured 0.80 of the vendor's tool"}
	want := r.Run.Cells[0].Broker + "/" + r.Run.Cells[0].StrategyLabel() + ": bound by the broker&#39;s publish path"
	if page := string(render(t, HTML, r)); !strings.Contains(page, want) {
		t.Errorf("report.html lacks the cell note %q", want)
	}
	if md := string(render(t, Markdown, r)); !strings.Contains(md, "- "+r.Run.Cells[0].Broker+"/"+r.Run.Cells[0].StrategyLabel()+": bound by the broker's publish path") {
		t.Error("report.md lacks the cell note")
	}
}

// TestWarmingCellRendered: a cell whose rate rose in every round is "not
// steady — still warming up" with its rise in the terminal's table,
// report.md and report.html, and each place says how the warm-up rounds
// went.
func TestWarmingCellRendered(t *testing.T) {
	r := makeBenchRun(t)
	r.Run.Rounds = 5
	rocket := &r.Run.Cells[3]
	rocket.Stats.Rise = results.RiseOf([]float64{9344, 12897, 14984, 15658, 16372})
	r.Run.Warmup = []results.Warmup{{Broker: "rocketmq", Strategy: "batch", Rounds: 2, Rates: []float64{9344, 12897}, Seconds: 185, Ended: results.WarmupTime}}
	const warming, warm = "NOT STEADY — still warming up: +75% over 5 rounds", "rocketmq/batch: 2 warm-up round(s) in 3m5s, 9,344 → 12,897 events/s, STILL RISING"
	var text bytes.Buffer
	if err := WriteSummary(&text, r.Run); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"summary": text.String(), "report.md": string(render(t, Markdown, r)), "report.html": html.UnescapeString(string(render(t, HTML, r)))} {
		if !strings.Contains(out, warming) || !strings.Contains(out, warm) {
			t.Errorf("%s lacks %q or %q", name, warming, warm)
		}
		if strings.Count(out, "still warming up: ") != 1 {
			t.Errorf("%s: %d cells still warming up, want rocketmq's alone", name, strings.Count(out, "still warming up: "))
		}
	}
}
