package results

import (
	"math"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestEstimateOfFewRoundsIsTheirRange(t *testing.T) {
	for _, tc := range []struct {
		in             []float64
		median, lo, hi float64
		level          float64
	}{
		{[]float64{7}, 7, 0, 0, 0},
		{[]float64{3, 1}, 2, 1, 3, 0.5},
		{[]float64{5, 1, 3}, 3, 1, 5, 0.75},
		{[]float64{10, 12, 11, 9, 30}, 11, 9, 30, 0.9375},
	} {
		e := EstimateOf(tc.in)
		if e.N != len(tc.in) || e.Median != tc.median || e.Lo != tc.lo || e.Hi != tc.hi || !near(e.Confidence, tc.level, 1e-9) {
			t.Errorf("EstimateOf(%v) = %+v, want median %v [%v, %v] at %v", tc.in, e, tc.median, tc.lo, tc.hi, tc.level)
		}
	}
	if (Estimate{}) != EstimateOf(nil) {
		t.Errorf("EstimateOf(nil) = %+v, want zero", EstimateOf(nil))
	}
}

func TestEstimateOfManyRoundsIsNarrowerThanTheirRange(t *testing.T) {
	in := []float64{100, 101, 99, 102, 98, 100, 103, 97, 100, 150, 50, 100}
	e := EstimateOf(in)
	if e.Median != 100 || e.Confidence < Confidence {
		t.Fatalf("EstimateOf = %+v, want median 100 at ≥ %v", e, Confidence)
	}
	if e.Lo <= 50 || e.Hi >= 150 || e.Lo > 100 || e.Hi < 100 {
		t.Errorf("interval [%v, %v] should hold the median and exclude the outliers", e.Lo, e.Hi)
	}
	if s := e.Spread(); s <= 0 || s > 0.05 {
		t.Errorf("Spread = %v, want a few percent", s)
	}
}

var higher = ChangeRule{Threshold: 0.05, HigherIsBetter: true}

func TestCompareRoundsFindings(t *testing.T) {
	base := []float64{100, 102, 98, 101, 99}
	for _, tc := range []struct {
		name string
		next []float64
		rule ChangeRule
		want Finding
	}{
		{"throughput fell 20%", []float64{80, 81, 79, 82, 78}, higher, Regression},
		{"throughput rose 20%", []float64{120, 121, 119, 122, 118}, higher, Improvement},
		{"same rounds", []float64{100, 102, 98, 101, 99}, higher, NoChange},
		{"interleaved", []float64{101, 99, 100, 103, 97}, higher, NoChange},
		// A real but small shift: every new round above every base
		// round, by 3%, under a 5% threshold.
		{"significant below threshold", []float64{104, 106, 103, 105, 104.5}, higher, NoChange},
		// The medians 20% apart, but the new rounds spread over the
		// base's: the test cannot tell.
		{"spread", []float64{60, 140, 80, 120, 81}, higher, Inconclusive},
		{"latency rose 20%", []float64{120, 121, 119, 122, 118}, ChangeRule{Threshold: 0.05}, Regression},
	} {
		c := CompareRounds(base, tc.next, tc.rule)
		if c.Finding != tc.want {
			t.Errorf("%s: %s (ratio %.3f, p %.4f, why %q), want %s", tc.name, c.Finding, c.Ratio, c.P, c.Why, tc.want)
		}
		if c.Single {
			t.Errorf("%s: 5+5 rounds marked single", tc.name)
		}
	}
}

func TestCompareRoundsIntervalHoldsTheRatio(t *testing.T) {
	base := []float64{100, 102, 98, 101, 99}
	next := []float64{80, 81, 79, 82, 78}
	c := CompareRounds(base, next, higher)
	if !(c.Lo > 0 && c.Lo <= c.Ratio && c.Ratio <= c.Hi) {
		t.Fatalf("interval [%v, %v] does not hold ratio %v", c.Lo, c.Hi, c.Ratio)
	}
	// Every new round is below every base one: the extreme orderings,
	// p = 2/C(10,5).
	if !near(c.P, 2.0/252, 1e-9) {
		t.Errorf("p = %v, want %v", c.P, 2.0/252)
	}
	if c.Hi >= 1 || c.Lo < 0.75 || c.Confidence < 0.9 {
		t.Errorf("interval [%v, %v] at %v: should lie below 1 and near 0.8", c.Lo, c.Hi, c.Confidence)
	}
}

func TestCompareRoundsTooFewRoundsIsInconclusive(t *testing.T) {
	c := CompareRounds([]float64{100, 101, 99}, []float64{50, 51, 49}, higher)
	if c.Finding != Inconclusive || !strings.Contains(c.Why, "4 or more rounds") {
		t.Errorf("3+3 rounds halving: %s (%q), want inconclusive asking for 4 rounds", c.Finding, c.Why)
	}
	if minUTestP(4, 4) > Alpha || minUTestP(3, 3) <= Alpha {
		t.Errorf("minUTestP(4,4)=%v minUTestP(3,3)=%v: 4+4 rounds can reach %v, 3+3 cannot", minUTestP(4, 4), minUTestP(3, 3), Alpha)
	}
}

func TestCompareRoundsSingleRunFallsBackToTheThreshold(t *testing.T) {
	c := CompareRounds([]float64{100}, []float64{80}, higher)
	if !c.Single || c.Finding != Regression || c.Why != "single run: no noise estimate" {
		t.Errorf("single 100 → 80: %+v, want a single-run regression", c)
	}
	c = CompareRounds([]float64{100}, []float64{97}, higher)
	if !c.Single || c.Finding != NoChange {
		t.Errorf("single 100 → 97 under 5%%: %+v, want a single-run no change", c)
	}
}

func TestCompareRoundsSpreadSaysHowManyRounds(t *testing.T) {
	c := CompareRounds([]float64{100, 102, 98, 101, 99}, []float64{60, 140, 80, 120, 81}, higher)
	if c.Finding != Inconclusive || !strings.Contains(c.Why, "rounds on each side") {
		t.Fatalf("%+v: want an inconclusive with a round count", c)
	}
	if n := roundsNeeded([]float64{100, 102, 98, 101, 99}, []float64{60, 140, 80, 120, 81}); n <= 5 {
		t.Errorf("roundsNeeded = %d, want more than the 5 run", n)
	}
}

// runs builds a series of n runs of r rounds each around level, with a
// deterministic ±2% wobble.
func runs(n, r int, level float64) [][]float64 {
	out := make([][]float64, n)
	for i := range out {
		for j := range r {
			w := float64((i*7+j*3)%5-2) / 100
			out[i] = append(out[i], level*(1+w))
		}
	}
	return out
}

func TestChangePointsFindTheStepOnly(t *testing.T) {
	rule := ChangeRule{Threshold: 0.1, HigherIsBetter: true}
	flat := runs(12, 5, 1000)
	if cp := ChangePoints(flat, rule); len(cp) != 0 {
		t.Errorf("flat series: change points %+v, want none", cp)
	}
	step := append(runs(6, 5, 1000), runs(6, 5, 700)...)
	cp := ChangePoints(step, rule)
	if len(cp) != 1 || cp[0].Index != 6 || cp[0].Suspect || cp[0].Change.Finding != Regression {
		t.Fatalf("step at 6: change points %+v, want one regression at 6", cp)
	}
	single := append(runs(6, 1, 1000), runs(6, 1, 1300)...)
	if cp := ChangePoints(single, rule); len(cp) != 1 || cp[0].Index != 6 || cp[0].Change.Finding != Improvement {
		t.Errorf("single-round runs, step at 6: %+v, want one improvement at 6", cp)
	}
}

func TestChangePointsNewestRunIsSuspect(t *testing.T) {
	rule := ChangeRule{Threshold: 0.1, HigherIsBetter: true}
	s := append(runs(8, 5, 1000), runs(1, 5, 600)...)
	cp := ChangePoints(s, rule)
	if len(cp) != 1 || cp[0].Index != 8 || !cp[0].Suspect {
		t.Fatalf("drop in the newest run: %+v, want one suspect change at 8", cp)
	}
	// A later run at the new level confirms it.
	s = append(s, runs(1, 5, 600)...)
	cp = ChangePoints(s, rule)
	if len(cp) != 1 || cp[0].Index != 8 || cp[0].Suspect {
		t.Errorf("confirmed by a later run: %+v, want one change at 8, not suspect", cp)
	}
	// A gap (a run that did not measure the figure) is skipped.
	s = append(runs(4, 5, 1000), nil)
	s = append(s, runs(4, 5, 1000)...)
	if cp := ChangePoints(s, rule); len(cp) != 0 {
		t.Errorf("flat with a gap: %+v, want none", cp)
	}
}

func TestExceedsP(t *testing.T) {
	// t(8): one-sided 5% at 1.860, 0.5% at 3.355.
	for _, c := range []struct {
		x, se, margin float64
		df            int
		lo, hi        float64
	}{
		{0.1 + 1.860*0.1, 0.1, 0.1, 8, 0.0495, 0.0505},
		{-(0.1 + 3.355*0.05), 0.05, 0.1, 8, 0.0049, 0.0051},
		{0.1, 0.05, 0.1, 8, 0.5, 0.5}, // at the margin: a coin toss
		{0.5, 0, 0.1, 8, 0, 0},        // all on the line, beyond the margin
		{0.05, 0, 0.1, 8, 1, 1},       // all on the line, within it
		{0.9, 0.01, 0.1, 0, 1, 1},     // no degree of freedom: no test
	} {
		if p := ExceedsP(c.x, c.se, c.margin, c.df); p < c.lo || p > c.hi {
			t.Errorf("ExceedsP(%v, %v, %v, %d) = %v, want in [%v, %v]", c.x, c.se, c.margin, c.df, p, c.lo, c.hi)
		}
	}
}

// TestCommonTrend: windows at different levels that each rise by a
// fifth are one line rising by a fifth; level differences between the
// windows are no trend.
func TestCommonTrend(t *testing.T) {
	rise := func(level float64) []float64 {
		w := make([]float64, 10)
		for i := range w {
			w[i] = level * (0.9 + 0.2*float64(i)/9)
		}
		return w
	}
	trend, se, df := CommonTrend([][]float64{rise(10000), rise(50000), rise(30000)})
	if math.Abs(trend-0.2) > 1e-9 || se > 1e-9 || df != 26 {
		t.Errorf("three windows rising 20%%: trend %v, se %v, df %d; want 0.2, 0, 26", trend, se, df)
	}
	flat := [][]float64{{10, 12, 10, 12}, {50, 48, 50, 48}}
	if trend, _, _ := CommonTrend(flat); math.Abs(trend) > 0.1 {
		t.Errorf("two flat windows at different levels: trend %v", trend)
	}
	if _, se, df := CommonTrend([][]float64{{1}, {2}}); df != 0 || !math.IsInf(se, 1) {
		t.Errorf("windows of one value: se %v, df %d; want +Inf, 0", se, df)
	}
}
