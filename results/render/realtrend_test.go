package render_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/inboxbench/inboxbench/brokers/none"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/render"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// slower is the extra work the later runs' strategy file does per event:
// 4 ms of PostgreSQL's own time (a SELECT, so the effect's changed rows
// still count one). Time rather than CPU, so the step stays a step when
// the machine is slow or busy: under -race on CI the harness itself runs
// at ~1,000 events/s, and a CPU-bound extra write (100 indexed rows an
// event) moved the rate by ~15%, inside the runs' own spread. Two
// consumers each waiting 4 ms an event cap the slower runs near 500
// events/s, whatever the faster ones reach.
const slower = `
SELECT pg_sleep(0.004);
`

// TestPublishMarksARealStep runs a small real series on the none broker
// (runner.Run, three rounds a run): three runs of a strategy file, then
// three of the same file made slower by a wait in PostgreSQL per event, and
// publishes them. The events/s trend must mark one change point, at the
// first slower run.
func TestPublishMarksARealStep(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	if testing.Short() {
		testenv.SkipUnlessCI(t, "six real runs of three rounds: not with -short")
	}
	base, err := os.ReadFile(filepath.Join("..", "..", "examples", "strategies", "tx.sql"))
	if err != nil {
		t.Fatal(err)
	}
	slow := strings.Replace(string(base), "-- @effect\n", "-- @effect\n"+slower+"\n", 1)
	spec, err := workload.Parse([]byte("name: real-step\nseed: 3\naggregates: 200\nevents: 2000\nwarmup: 300ms\nmessage_size: 256\nconsumers: 2\nshards: 2\nstrategy: tx\n"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "inbox.sql")
	out := t.TempDir()
	for i := range 6 {
		content := string(base)
		if i >= 3 {
			content = slow
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := inbox.LoadStrategyFile(file)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		run, _, err := runner.Run(ctx, runner.Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Extra: []inbox.Strategy{st},
			Rounds: 3, RunID: fmt.Sprintf("real-step-%d-%d", i, time.Now().UnixNano()%1e6), Output: runner.Output{Dir: out},
			Measure: runner.Measure{Latency: true, Audit: true}, Limits: runner.Limits{Stall: 20 * time.Second}})
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		c := run.Cells[0]
		t.Logf("run %d (%s): %.0f events/s over rounds %v, verdict %s", i, c.Strategy, c.Throughput.EventsPerS, roundRates(c.Rounds), c.Invariants.Verdict)
	}
	site := filepath.Join(t.TempDir(), "site")
	// The threshold is the publish option a drifting machine uses: the
	// step is ~70%, and on CI's shared 2 cores under -race the unchanged
	// runs of either half drifted by up to 25% (340 → 264 → 243 events/s),
	// a real move the default 10% rightly marks.
	if _, err := render.Publish(render.PublishOptions{Dirs: []string{out}, Out: site, Threshold: 0.4}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(site, "trends", "real-step.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i := strings.Index(page, `data-chart="trend-0-events"`)
	if i < 0 {
		t.Fatal("no events/s chart")
	}
	chart := page[i:]
	chart = chart[:strings.Index(chart, "</figure>")]
	marks := regexp.MustCompile(`<g class="change-point"><path d="M ([0-9.]+) [^>]*/><text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(chart, -1)
	points := regexp.MustCompile(`<circle cx="([0-9.]+)"`).FindAllStringSubmatch(chart, -1)
	if len(points) != 6 {
		t.Fatalf("%d points, want 6", len(points))
	}
	// One change point at the first slower run. A shared machine drifts
	// while the series runs: a change resting on the newest run alone
	// may be marked too, as suspect, which is what suspect is for.
	var firm []string
	for _, m := range marks {
		if !strings.HasSuffix(m[2], "suspect") {
			firm = append(firm, m[1])
			if !strings.HasPrefix(m[2], "-") {
				t.Errorf("the change point %q is not a drop", m[2])
			}
		} else if m[1] != points[5][1] {
			t.Errorf("a suspect change point at x %s, not at the newest run (x %s)", m[1], points[5][1])
		}
	}
	if len(firm) != 1 || firm[0] != points[3][1] {
		t.Fatalf("change markers %v, want one (not suspect) at the first slower run (x %s)", marks, points[3][1])
	}
}

func roundRates(rounds []results.Cell) []string {
	var out []string
	for _, r := range rounds {
		out = append(out, fmt.Sprintf("%.0f", r.Throughput.EventsPerS))
	}
	return out
}
