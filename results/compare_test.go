package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
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
	if c.Regressed() {
		t.Fatalf("identical runs regressed: %v", c.Regressions)
	}
	if len(c.Cells) != 4 || len(c.OnlyBase)+len(c.OnlyNew) != 0 {
		t.Errorf("cells %d, only base %v, only new %v", len(c.Cells), c.OnlyBase, c.OnlyNew)
	}
	out := compareText(t, c)
	if !strings.Contains(out, "OK: no regression beyond the threshold in 4 compared cell(s)") || !strings.Contains(out, "+0.0%") {
		t.Errorf("unexpected output:\n%s", out)
	}
}

func TestCompareSyntheticRegression(t *testing.T) {
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
	if !c.Regressed() {
		t.Fatal("a 20% throughput drop passed a 10% threshold")
	}
	joined := strings.Join(c.Regressions, "\n")
	for _, want := range []string{"kafka/tx events/s", "kafka/tx e2e p99", "rabbitmq/tx dedup p99"} {
		if !strings.Contains(joined, want) {
			t.Errorf("regressions lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "rabbitmq/tx events/s") {
		t.Error("a throughput gain was reported as a regression")
	}
	out := compareText(t, c)
	for _, want := range []string{"REGRESSED", "-20.0%", "+30.0%", "improved", "REGRESSION: 3 check(s)"} {
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

func TestCompareLockWaitShare(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, new float64
		regressed bool
	}{
		{"noise below one point", 0.001, 0.004, false},
		{"real increase", 0.10, 0.13, true},
		{"within threshold", 0.10, 0.105, false},
		{"from none to real", 0, 0.05, true},
		{"from none to noise", 0, 0.005, false},
		{"decrease", 0.2, 0.1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, next := fixtureRun(t), fixtureRun(t)
			cellOf(t, base, "kafka", "tx").Contention.LockWaitShare = tc.base
			cellOf(t, next, "kafka", "tx").Contention.LockWaitShare = tc.new
			c, err := Compare(base, next, CompareOptions{MaxRegression: 0.10})
			if err != nil {
				t.Fatal(err)
			}
			if c.Regressed() != tc.regressed {
				t.Errorf("regressed = %v, want %v (%v)", c.Regressed(), tc.regressed, c.Regressions)
			}
		})
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
	if out := compareText(t, c); !strings.Contains(out, "no duplicates delivered") {
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
