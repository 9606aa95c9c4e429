package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/internal/testenv/golden"
)

func fixtureRun(t *testing.T) *Run {
	t.Helper()
	r, err := Read(filepath.Join("testdata", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func cellOf(t *testing.T, r *Run, broker, strategy string) *Cell {
	t.Helper()
	for i := range r.Cells {
		if r.Cells[i].Broker == broker && r.Cells[i].Strategy == strategy {
			return &r.Cells[i]
		}
	}
	t.Fatalf("no cell %s/%s", broker, strategy)
	return nil
}

func compareText(t *testing.T, c *Comparison) string {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCompareIdenticalRuns(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if c.Regressed() || len(c.Inconclusive) > 0 {
		t.Fatalf("identical runs: regressions %v, inconclusive %v", c.Regressions, c.Inconclusive)
	}
	if len(c.Cells) != 4 || len(c.OnlyBase)+len(c.OnlyNew) != 0 {
		t.Errorf("cells %d, only base %v, only new %v", len(c.Cells), c.OnlyBase, c.OnlyNew)
	}
	out := compareText(t, c)
	for _, want := range []string{"OK: no significant regression in 4 compared cell(s)", "+0.0%", "single run: no noise estimate"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestCompareSingleRunsByThreshold: with one round per side there is no
// noise estimate; events/s is judged against the threshold alone, and the
// latencies of saturated cells are shown but never decide.
func TestCompareSingleRunsByThreshold(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	kt := cellOf(t, next, "kafka", "tx")
	kt.Throughput.EventsPerS *= 0.80 // −20%: worse
	kt.Latency.E2E.P99 = kt.Latency.E2E.P99 * 13 / 10
	rt := cellOf(t, next, "rabbitmq", "tx")
	rt.Latency.Dedup.P99 *= 2
	rt.Throughput.EventsPerS *= 1.5 // better: never a regression

	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(c.Regressions, "\n")
	if !c.Regressed() || len(c.Regressions) != 1 || !strings.Contains(joined, "kafka/tx events/s") {
		t.Fatalf("want exactly kafka/tx events/s regressed: %v", c.Regressions)
	}
	out := compareText(t, c)
	for _, want := range []string{"REGRESSION (single run: no noise estimate)", "-20.0%", "+30.0%", "improvement", "not gated: queueing-dominated", "REGRESSION: 1 check(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The same change under a looser threshold is fine.
	c, err = Compare(base, next, CompareOptions{MaxRegression: 1.5})
	if err != nil || c.Regressed() {
		t.Errorf("150%% threshold: regressed=%v err=%v %v", c.Regressed(), err, c.Regressions)
	}
}

// rounds gives a cell n rounds of events/s around level (a ±2% wobble),
// each a copy of the cell, the cell's own figure their median.
func withRounds(c *Cell, n int, level float64) {
	c.Rounds = nil
	for i := range n {
		r := *c
		r.Round, r.Rounds = i+1, nil
		r.Throughput.EventsPerS = level * (1 + float64(i%5-2)/100)
		c.Rounds = append(c.Rounds, r)
	}
	*c = Aggregate(c.Rounds)
}

func TestCompareRounds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rounds    int
		base, new float64
		want      Finding
	}{
		{"a real 20% drop", 5, 1000, 800, Regression},
		{"a real 20% gain", 5, 1000, 1200, Improvement},
		{"the same level", 5, 1000, 1000, NoChange},
		{"a real 3% drop under 10%", 5, 1000, 970, NoChange},
		{"too few rounds", 3, 1000, 500, Inconclusive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, next := fixtureRun(t), fixtureRun(t)
			withRounds(cellOf(t, base, "kafka", "tx"), tc.rounds, tc.base)
			withRounds(cellOf(t, next, "kafka", "tx"), tc.rounds, tc.new)
			c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
			if err != nil {
				t.Fatal(err)
			}
			got := c.Cells[0].Deltas[0].Change
			if c.Cells[0].Strategy != "tx" || got.Finding != tc.want || got.Single {
				t.Fatalf("%s: %+v, want %s", c.Cells[0].Broker, got, tc.want)
			}
			if c.Regressed() != (tc.want == Regression) || (len(c.Inconclusive) > 0) != (tc.want == Inconclusive) {
				t.Errorf("regressions %v, inconclusive %v", c.Regressions, c.Inconclusive)
			}
		})
	}
}

// TestCompareGolden pins the table a CI log shows.
func TestCompareGolden(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	withRounds(cellOf(t, base, "kafka", "tx"), 5, 20000)
	withRounds(cellOf(t, next, "kafka", "tx"), 5, 16000)
	withRounds(cellOf(t, base, "rabbitmq", "tx"), 5, 9000)
	withRounds(cellOf(t, next, "rabbitmq", "tx"), 5, 9100)
	base.Cells, next.Cells = []Cell{base.Cells[0], base.Cells[2]}, []Cell{next.Cells[0], next.Cells[2]}
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "compare-rounds.txt"), []byte(compareText(t, c)))
}

func TestCompareLabels(t *testing.T) {
	run := fixtureRun(t)
	a, b := *cellOf(t, run, "kafka", "tx"), *cellOf(t, run, "kafka", "tx")
	a.Strategy, b.Strategy = "base", "new"
	withRounds(&a, 5, 1000)
	withRounds(&b, 5, 700)
	run.Cells = append(run.Cells, a, b)
	c, err := CompareLabels(run, "base", "new", CompareOptions{MaxRegression: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Cells) != 1 || !c.Regressed() || c.Cells[0].Strategy != "base → new" {
		t.Fatalf("cells %+v, regressions %v", c.Cells, c.Regressions)
	}
	if _, err := CompareLabels(run, "base", "other", CompareOptions{}); err == nil || !strings.Contains(err.Error(), "its strategies:") {
		t.Errorf("a label no cell has: %v", err)
	}
}

func TestCompareLockWaitShareNeverGates(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	cellOf(t, base, "kafka", "tx").Contention.LockWaitShare = 0.001
	cellOf(t, next, "kafka", "tx").Contention.LockWaitShare = 0.004
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if c.Regressed() {
		t.Errorf("lock-wait share decided the comparison: %v", c.Regressions)
	}
	if out := compareText(t, c); !strings.Contains(out, "below 1 point: noise") {
		t.Errorf("a 0.3-point change is not called noise:\n%s", out)
	}
}

func TestCompareVerdicts(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	cellOf(t, next, "kafka", "tx").Invariants.Verdict = VerdictFail
	c, _ := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if !c.Regressed() || !strings.Contains(strings.Join(c.Regressions, ";"), "kafka/tx verdict PASS → FAIL") {
		t.Errorf("a correct strategy that stopped passing: %v", c.Regressions)
	}

	base, next = fixtureRun(t), fixtureRun(t)
	cellOf(t, next, "rabbitmq", "broken-split").Invariants.Verdict = VerdictPass
	c, _ = Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if !c.Regressed() {
		t.Error("a negative control no longer caught is a regression")
	}

	base, next = fixtureRun(t), fixtureRun(t)
	cellOf(t, next, "kafka", "tx").Error = "consumer timed out"
	c, _ = Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if !c.Regressed() {
		t.Error("a cell that stopped completing is a regression")
	}
}

func TestCompareDifferentWorkloads(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	var w map[string]any
	if err := json.Unmarshal(next.Workload, &w); err != nil {
		t.Fatal(err)
	}
	w["seed"] = 43
	w["faults"].(map[string]any)["duplicate_republish"] = 0.5
	next.Workload, _ = json.Marshal(w)

	_, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if !errors.Is(err, ErrDifferentWorkloads) {
		t.Fatalf("err = %v, want ErrDifferentWorkloads", err)
	}
	for _, want := range []string{"seed: 42 → 43", "faults.duplicate_republish: 0.05 → 0.5"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10, AllowDifferentWorkloads: true})
	if err != nil {
		t.Fatal(err)
	}
	if out := compareText(t, c); !strings.Contains(out, "different workloads, compared anyway") {
		t.Errorf("output does not warn:\n%s", out)
	}

	// Key order and whitespace are not differences.
	reordered := fixtureRun(t)
	reordered.Workload = json.RawMessage(`{"seed":42,` + strings.TrimPrefix(string(mustCompact(t, base.Workload)), "{"))
	if _, err := Compare(base, reordered, CompareOptions{}); err != nil {
		t.Errorf("same workload written differently: %v", err)
	}
}

func mustCompact(t *testing.T, raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestCompareCellsInOneRunOnly(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	next.Cells = next.Cells[:3]
	next.Cells = append(next.Cells, Cell{Broker: "rocketmq", Strategy: "tx", Invariants: Invariants{Verdict: VerdictPass}})
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if c.Regressed() {
		t.Errorf("missing cells are listed, not regressions: %v", c.Regressions)
	}
	out := compareText(t, c)
	if !strings.Contains(out, "only in base (not compared): rabbitmq/broken-split") || !strings.Contains(out, "only in new (not compared): rocketmq/tx") {
		t.Errorf("output:\n%s", out)
	}
}

func TestCompareNoSamples(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	cellOf(t, base, "kafka", "tx").Latency.Dedup = Summary{}
	cellOf(t, next, "kafka", "tx").Latency.Dedup.P99 = 1e9
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if c.Regressed() {
		t.Errorf("dedup p99 without base samples was judged: %v", c.Regressions)
	}
	if out := compareText(t, c); !strings.Contains(out, "no samples") {
		t.Errorf("output does not say why dedup was not judged:\n%s", out)
	}
}

func TestParseThreshold(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"10%", 0.10, true},
		{"10", 0.10, true},
		{" 2.5 % ", 0.025, true},
		{"0", 0, true},
		{"150%", 1.5, true},
		{"", 0, false},
		{"-5%", 0, false},
		{"ten", 0, false},
		{"NaN", 0, false},
		{"10%%", 0, false},
	} {
		got, err := ParseThreshold(tc.in)
		if (err == nil) != tc.ok || (tc.ok && math.Abs(got-tc.want) > 1e-12) {
			t.Errorf("ParseThreshold(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestHolmOverACellsMetrics(t *testing.T) {
	est := Estimate{N: 5, Median: 1}
	mk := func(p float64, f Finding) Delta {
		return Delta{Change: Change{Base: est, New: est, Ratio: 1.2, P: p, Finding: f}}
	}
	ds := []Delta{mk(0.008, Regression), mk(0.03, Regression), mk(0.5, NoChange), mk(0.02, Improvement)}
	holm(ds)
	// m = 4: 0.008 < 0.0125 holds; 0.02 is not below 0.05/3, so it and
	// every larger p fall.
	if ds[0].Change.Finding != Regression {
		t.Errorf("smallest p: %s, want regression", ds[0].Change.Finding)
	}
	for _, i := range []int{1, 3} {
		if ds[i].Change.Finding != NoChange || !strings.Contains(ds[i].Change.Why, "Holm") {
			t.Errorf("metric %d: %s (%q), want no significant change by Holm", i, ds[i].Change.Finding, ds[i].Change.Why)
		}
	}
}

// TestHolmFamilies: a metric that gates nothing does not raise the bar
// for one that does. events/s alone gates a saturated cell, so its
// p = 0.016 (five rounds a side, one overlap) stands as a regression
// beside three informational metrics, which are corrected among
// themselves.
func TestHolmFamilies(t *testing.T) {
	est := Estimate{N: 5, Median: 1}
	mk := func(p float64, f Finding, gates bool) Delta {
		return Delta{Gates: gates, Change: Change{Base: est, New: est, Ratio: 0.7, P: p, Finding: f}}
	}
	ds := []Delta{mk(0.016, Regression, true), mk(0.02, Regression, false), mk(0.048, Regression, false), mk(0.3, NoChange, false)}
	holm(ds)
	if ds[0].Change.Finding != Regression {
		t.Errorf("the gating metric: %s (%q), want regression", ds[0].Change.Finding, ds[0].Change.Why)
	}
	if ds[1].Change.Finding != NoChange || ds[2].Change.Finding != NoChange || !strings.Contains(ds[1].Change.Why, "3 other metrics") {
		t.Errorf("informational metrics: %s (%q), %s; want no significant change by Holm over 3", ds[1].Change.Finding, ds[1].Change.Why, ds[2].Change.Finding)
	}
}

// TestUngatedMetricIsJudgedByTheTestAlone: a metric that does not gate
// (e2e p99 of a saturated cell) whose medians differ beyond the threshold
// without a significant test is no significant change, not inconclusive;
// the same spread on events/s, which gates, stays inconclusive.
func TestUngatedMetricIsJudgedByTheTestAlone(t *testing.T) {
	mk := func(eps, p99 []float64) *Cell {
		var rs []Cell
		for i := range eps {
			rs = append(rs, Cell{Broker: "none", Strategy: "batch", Mode: ModeSaturated,
				Throughput: Throughput{EventsPerS: eps[i]},
				Latency:    Latencies{E2E: Summary{Count: 100, P99: int64(p99[i])}}})
		}
		c := Aggregate(rs)
		return &c
	}
	spread := []float64{60, 140, 80, 120, 81}
	base := mk([]float64{100, 100, 100, 100, 100}, []float64{100, 100, 100, 100, 100})
	next := mk(spread, spread)
	d := compareCell(base, next, 0.1)
	for _, m := range d.Deltas {
		switch m.Metric {
		case "events/s":
			if !m.Gates || m.Change.Finding != Inconclusive {
				t.Errorf("events/s: gates %v, %s; want a gating inconclusive", m.Gates, m.Change.Finding)
			}
		case "e2e p99":
			if m.Gates || m.Change.Finding != NoChange {
				t.Errorf("e2e p99: gates %v, %s; want no significant change, not gated", m.Gates, m.Change.Finding)
			}
		}
	}
}

// TestCompareVsBaseline: a broker cell's ratio to the baseline of the same
// round is shown beside events/s and never gates. When the baseline slowed
// as much as the cell (the host, not the broker), the regression says so;
// when only the cell slowed, the ratio moves with it and nothing is added.
func TestCompareVsBaseline(t *testing.T) {
	// run builds a run of five rounds: none at noneLevel, kafka at
	// kafkaLevel, each round's ratio from that round's two figures.
	run := func(noneLevel, kafkaLevel float64) *Run {
		var none, kafka []Cell
		for i := range 5 {
			wobble := 1 + float64(i%5-2)/100
			nr := Cell{Broker: "none", Strategy: "batch", Baseline: true, Round: i + 1, Mode: ModeSaturated,
				Throughput: Throughput{EventsPerS: noneLevel * wobble}}
			kr := Cell{Broker: "kafka", Strategy: "batch", Round: i + 1, Mode: ModeSaturated,
				Throughput: Throughput{EventsPerS: kafkaLevel * wobble}}
			kr.Throughput.VsBaseline = kr.Throughput.EventsPerS / nr.Throughput.EventsPerS
			none, kafka = append(none, nr), append(kafka, kr)
		}
		return &Run{RunID: "r", Cells: []Cell{Aggregate(none), Aggregate(kafka)}}
	}
	vsNone := func(c *Comparison) *Delta {
		for i := range c.Cells {
			for j, d := range c.Cells[i].Deltas {
				if d.Metric == "vs none" {
					if c.Cells[i].Broker != "kafka" {
						t.Fatalf("a vs none row for %s", c.Cells[i].Broker)
					}
					return &c.Cells[i].Deltas[j]
				}
			}
		}
		t.Fatal("no vs none row")
		return nil
	}

	// The host slowed: every cell 20% lower, the ratio the same.
	c, err := Compare(run(100000, 60000), run(80000, 48000), CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if d := vsNone(c); d.Gates || d.Change.Finding != NoChange {
		t.Errorf("vs none: gates %v, %s; want no significant change, not gated", d.Gates, d.Change.Finding)
	}
	joined := strings.Join(c.Regressions, "\n")
	if !strings.Contains(joined, "kafka/batch events/s") || !strings.Contains(joined, "vs none unchanged (60.0% → 60.0%") {
		t.Errorf("regressions do not say the baseline moved too:\n%s", joined)
	}
	if out := compareText(t, c); !strings.Contains(out, "not gated: over the baseline of the same round") {
		t.Errorf("the table lacks the vs none row:\n%s", out)
	}

	// The broker's path slowed: the ratio falls with it, and is still not
	// what gates.
	c, err = Compare(run(100000, 60000), run(100000, 45000), CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if d := vsNone(c); d.Gates || d.Change.Finding != Regression {
		t.Errorf("vs none: gates %v, %s; want a regression shown, not gated", d.Gates, d.Change.Finding)
	}
	if len(c.Regressions) != 1 || strings.Contains(c.Regressions[0], "vs none unchanged") {
		t.Errorf("regressions %v: want kafka's events/s alone, not set down to the host", c.Regressions)
	}
}

// Two runs measured on different machines or servers compare anyway, and
// the text says what differed; the same run's environment says nothing.
func TestCompareNamesADifferentEnvironment(t *testing.T) {
	base, next := fixtureRun(t), fixtureRun(t)
	base.Env.Cores, next.Env.Cores = 2, 1
	base.Env.Brokers, next.Env.Brokers = map[string]string{"kafka": "4.1.2"}, map[string]string{"kafka": "4.0.0", "rabbitmq": "3.10.8"}
	c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cores: 2 → 1", "kafka: 4.1.2 → 4.0.0", "rabbitmq: - → 3.10.8"}
	if !slices.Equal(c.EnvDiffs, want) {
		t.Errorf("EnvDiffs = %q, want %q", c.EnvDiffs, want)
	}
	if text := compareText(t, c); !strings.Contains(text, "warning: measured on different machines or servers:\n  cores: 2 → 1\n") {
		t.Errorf("the text does not name the difference:\n%s", text)
	}
	if same, err := Compare(base, base, CompareOptions{MaxRegression: 0.10}); err != nil || len(same.EnvDiffs) > 0 {
		t.Errorf("a run against itself: diffs %q, err %v", same.EnvDiffs, err)
	}
}
