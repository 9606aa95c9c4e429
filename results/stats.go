package results

import (
	"fmt"
	"math"
	"slices"

	"github.com/aclements/go-moremath/stats"
	"golang.org/x/perf/benchmath"
)

// The statistics every figure of repeated rounds goes through: a median
// with its confidence interval (benchmath's order-statistic interval, no
// assumption on the distribution), and the comparison of two sets of
// rounds by the Mann-Whitney U test, as benchstat does, with the
// interval of the change from the same test's distribution (Moses'
// interval for the shift, on logarithms, so it is an interval of the
// ratio). Rounds of a benchmark are not normally distributed (a
// checkpoint, a JIT compilation or a noisy neighbour lands in one round
// and not in another), so nothing here assumes they are.

// Alpha is the significance level of every comparison.
const Alpha = 0.05

// Confidence is the level of the intervals, where the rounds allow it:
// fewer than six rounds cannot bound a median at 95%, and their
// interval is then the range of the rounds, at the level it has
// (Estimate.Confidence: 94% for 5 rounds, 88% for 4, 75% for 3).
const Confidence = 0.95

// Estimate is the median of repeated measurements of one figure, with its
// confidence interval.
type Estimate struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	// Lo and Hi bound the median at Confidence (their actual level, at
	// least the one asked for); both zero when N < 2.
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Confidence float64 `json:"confidence"`
}

// EstimateOf summarises values (which it does not modify).
func EstimateOf(values []float64) Estimate {
	n := len(values)
	if n == 0 {
		return Estimate{}
	}
	s := benchmath.NewSample(slices.Clone(values), &benchmath.Thresholds{CompareAlpha: Alpha})
	if n == 1 {
		return Estimate{N: 1, Median: s.Values[0]}
	}
	// The widest interval n rounds have, [min, max], holds the median
	// with probability 1 - 2^(1-n): ask for no more than that.
	level := min(Confidence, 1-math.Pow(2, float64(1-n)))
	sum := benchmath.AssumeNothing.Summary(s, level)
	e := Estimate{N: n, Median: sum.Center, Lo: sum.Lo, Hi: sum.Hi, Confidence: sum.Confidence}
	if math.IsInf(e.Lo, 0) || math.IsInf(e.Hi, 0) {
		e.Lo, e.Hi, e.Confidence = s.Values[0], s.Values[n-1], 1-math.Pow(2, float64(1-n))
	}
	return e
}

// Spread is the interval's half-width relative to the median, the "±"
// benchstat prints; zero without an interval.
func (e Estimate) Spread() float64 {
	if e.N < 2 || e.Median == 0 {
		return 0
	}
	return max(e.Hi/e.Median-1, 1-e.Lo/e.Median)
}

// Finding is what a comparison of two sets of rounds concludes about one
// metric.
type Finding string

const (
	// Regression: the metric got worse by more than the threshold, and
	// the test says the difference is real (p < Alpha).
	Regression Finding = "regression"
	// Improvement: better by more than the threshold, p < Alpha.
	Improvement Finding = "improvement"
	// NoChange: no difference the test can see (p ≥ Alpha) and the
	// medians within the threshold, or a real difference smaller than
	// the threshold.
	NoChange Finding = "no significant change"
	// Inconclusive: too few rounds for the test to ever reach Alpha, or
	// medians further apart than the threshold with rounds spread too
	// widely to tell.
	Inconclusive Finding = "inconclusive"
)

// ChangeRule says how to judge one metric's change.
type ChangeRule struct {
	// Threshold is the smallest relative change that counts (0.1: 10%).
	Threshold float64
	// HigherIsBetter: events/s; lower is better for latencies.
	HigherIsBetter bool
}

// Change is one metric compared across two sets of rounds.
type Change struct {
	Base Estimate `json:"base"`
	New  Estimate `json:"new"`
	// Ratio is New's median over Base's; Lo and Hi bound the ratio at
	// Confidence (zero when the rounds cannot bound it).
	Ratio      float64 `json:"ratio"`
	Lo         float64 `json:"lo,omitempty"`
	Hi         float64 `json:"hi,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
	// P is the Mann-Whitney U test's p-value (1 when it could not run).
	P       float64 `json:"p"`
	Finding Finding `json:"finding"`
	// Single: one round on each side, so no noise estimate: the outcome
	// then compares the two figures with the threshold alone.
	Single bool `json:"single,omitempty"`
	// Why explains an inconclusive or single-run outcome, and how many
	// rounds would help.
	Why string `json:"why,omitempty"`
}

// Rel is the relative change, New/Base - 1.
func (c Change) Rel() float64 { return c.Ratio - 1 }

// CompareRounds compares the rounds of one metric, base against next.
func CompareRounds(base, next []float64, rule ChangeRule) Change {
	c := Change{Base: EstimateOf(base), New: EstimateOf(next), P: 1}
	if c.Base.N == 0 || c.New.N == 0 || c.Base.Median == 0 {
		c.Finding, c.Why = Inconclusive, "no figure to compare on one side"
		return c
	}
	c.Ratio = c.New.Median / c.Base.Median
	worse := c.Rel() > rule.Threshold
	better := c.Rel() < -rule.Threshold
	if rule.HigherIsBetter {
		worse, better = c.Rel() < -rule.Threshold, c.Rel() > rule.Threshold
	}
	byThreshold := func() Finding {
		switch {
		case worse:
			return Regression
		case better:
			return Improvement
		}
		return NoChange
	}
	if c.Base.N == 1 && c.New.N == 1 {
		c.Single, c.Finding, c.Why = true, byThreshold(), "single run: no noise estimate"
		return c
	}
	c.Lo, c.Hi, c.Confidence = ratioInterval(base, next)
	if res, err := stats.MannWhitneyUTest(base, next, stats.LocationDiffers); err == nil {
		c.P = res.P
	}
	if minP := minUTestP(c.Base.N, c.New.N); minP > Alpha {
		c.Finding = Inconclusive
		c.Why = fmt.Sprintf("%d+%d rounds cannot show a difference at p < %.2f (the smallest p they allow is %.2f): run 4 or more rounds on each side",
			c.Base.N, c.New.N, Alpha, minP)
		return c
	}
	switch {
	case c.P < Alpha:
		c.Finding = byThreshold()
	case !worse && !better:
		c.Finding = NoChange
	default:
		c.Finding = Inconclusive
		c.Why = fmt.Sprintf("the medians differ by %+.1f%%, beyond the threshold of %.0f%%, but the rounds spread too widely to tell (p = %.2f): about %d rounds on each side would",
			100*c.Rel(), 100*rule.Threshold, c.P, roundsNeeded(base, next))
	}
	return c
}

// minUTestP is the smallest two-sided p-value the U test can give two
// samples of sizes n1 and n2 without ties: both extreme orderings, out of
// C(n1+n2, n1).
func minUTestP(n1, n2 int) float64 {
	return min(1, 2/binomial(n1+n2, n1))
}

func binomial(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// ratioInterval bounds next/base at Confidence or less: the Moses
// interval of the shift between the logarithms, whose order statistics
// come from the U distribution of the same sizes (the interval that
// inverts the U test). Zero when the sizes cannot give one.
func ratioInterval(base, next []float64) (lo, hi, level float64) {
	var d []float64
	for _, b := range base {
		for _, n := range next {
			if b <= 0 || n <= 0 {
				return 0, 0, 0
			}
			d = append(d, math.Log(n)-math.Log(b))
		}
	}
	slices.Sort(d)
	u := stats.UDist{N1: len(base), N2: len(next)}
	// The largest k with P(U ≤ k-1) ≤ (1-Confidence)/2: the interval
	// [d(k), d(mn+1-k)] then holds the shift at 1 - 2 P(U ≤ k-1).
	k := 0
	for k+1 <= len(d)/2 && u.CDF(float64(k)) <= (1-Confidence)/2 {
		k++
	}
	if k == 0 {
		// Not even the extremes reach Confidence: take them, at the
		// level they have.
		k = 1
	}
	level = 1 - 2*u.CDF(float64(k-1))
	return math.Exp(d[k-1]), math.Exp(d[len(d)-k]), level
}

// roundsNeeded estimates how many rounds on each side would show the
// observed change at Alpha with 80% power, from the rounds' spread: the
// normal approximation for two samples, times π/3 for the U test's
// efficiency. It is a hint, not a promise.
func roundsNeeded(base, next []float64) int {
	lb, ln := logsOf(base), logsOf(next)
	d := math.Abs(medianOf(ln) - medianOf(lb))
	s := math.Sqrt((varianceOf(lb) + varianceOf(ln)) / 2)
	if d == 0 || s == 0 {
		return max(len(base), len(next)) + 1
	}
	const zAlpha, zPower = 1.96, 0.84
	n := 2 * math.Pow((zAlpha+zPower)*s/d, 2) * math.Pi / 3
	return max(max(len(base), len(next))+1, int(math.Ceil(n)))
}

func logsOf(v []float64) []float64 {
	out := make([]float64, 0, len(v))
	for _, x := range v {
		if x > 0 {
			out = append(out, math.Log(x))
		}
	}
	return out
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return stats.Sample{Xs: v}.Quantile(0.5)
}

func varianceOf(v []float64) float64 {
	if len(v) < 2 {
		return 0
	}
	return stats.Sample{Xs: v}.Variance()
}

// ExceedsP is the one-sided p-value of the hypothesis that an estimate's
// size stays within margin (|x| <= margin), given its standard error se
// and df degrees of freedom (Student's t): small when x is shown to be
// beyond the margin. Without a degree of freedom there is no test (1); a
// zero error (points all on the line) decides by the estimate alone.
func ExceedsP(x, se, margin float64, df int) float64 {
	beyond := math.Abs(x) - margin
	switch {
	case df < 1 || math.IsNaN(x) || math.IsNaN(se):
		return 1
	case se == 0 && beyond > 0:
		return 0
	case se == 0:
		return 1
	}
	return 1 - stats.TDist{V: float64(df)}.CDF(beyond/se)
}

// CommonTrend fits one least-squares line through several windows of
// equally spaced values, each window with its own level: every window is
// divided by its own mean, so the slope is relative, and centred on its
// own mean time. It returns the line's change over a window as long as
// the longest (+0.2: it rose by a fifth), the change's standard error,
// and the degrees of freedom (values minus windows minus one). Windows
// of fewer than two values are left out; with no degree of freedom the
// error is +Inf.
func CommonTrend(windows [][]float64) (trend, se float64, df int) {
	var sxy, sxx float64
	type fitted struct {
		y          []float64
		mean, xbar float64
	}
	var fits []fitted
	longest, n := 0, 0
	for _, w := range windows {
		if len(w) < 2 {
			continue
		}
		m := stats.Mean(w)
		if m == 0 {
			continue
		}
		f := fitted{y: w, mean: m, xbar: float64(len(w)-1) / 2}
		for i, v := range w {
			dx := float64(i) - f.xbar
			sxy += dx * (v/m - 1)
			sxx += dx * dx
		}
		fits = append(fits, f)
		longest, n = max(longest, len(w)), n+len(w)
	}
	df = n - len(fits) - 1
	if len(fits) == 0 || sxx == 0 {
		return 0, math.Inf(1), max(df, 0)
	}
	slope := sxy / sxx
	var res float64
	for _, f := range fits {
		for i, v := range f.y {
			d := v/f.mean - 1 - slope*(float64(i)-f.xbar)
			res += d * d
		}
	}
	span := float64(longest - 1)
	if df < 1 {
		return slope * span, math.Inf(1), 0
	}
	return slope * span, math.Sqrt(res/float64(df)/sxx) * span, df
}
