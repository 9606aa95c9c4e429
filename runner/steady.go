package runner

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/aclements/go-moremath/stats"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// A steady-state cell (a workload with measure) runs for a time: it warms
// up until its rate has settled, then measures for the window asked, and
// then stops publishing; what was published is drained and judged like
// any stream. The warm-up covers whatever is still getting faster — the
// consumers joining, a JVM broker compiling its hot paths, PostgreSQL's
// caches — because it ends on what the cell measures, the effect rate,
// not at a fixed time.

const (
	// settleSpan is the length of each of the two consecutive spans whose
	// rates are compared to call the rate settled.
	settleSpan = 2 * time.Second
	// settleTolerance is how far apart the two spans' rates may be (and,
	// at a fixed rate, how far from the rate).
	settleTolerance = 0.05
	// steadyTrend is the largest change of the window's least-squares
	// rate, relative to its mean, that is still a steady window.
	steadyTrend = results.SteadyTrend
	// stallFraction: a second of the window whose rate fell below this
	// share of the window's median rate is a stall, and the window is not
	// steady. A stall that recovers leaves little slope (a V: -98% fitted
	// over a window that fell to 4k from 50k events/s for three seconds,
	// then came back, whose slope is no evidence of a trend), yet the figure rests on
	// a disturbed window.
	stallFraction = 0.25
	// minWindowEvents is the fewest effects a window must hold for its
	// rate to be a figure.
	minWindowEvents = 1000
	// sampleEvery is how often the effect count is sampled.
	sampleEvery = 250 * time.Millisecond
)

// sample is the effect count at a moment of the cell.
type sample struct {
	at      time.Duration // since the start of the cell
	effects int64
}

// rateBetween is the effect rate between two samples, per second.
func rateBetween(a, b sample) float64 {
	if b.at <= a.at {
		return 0
	}
	return float64(b.effects-a.effects) / (b.at - a.at).Seconds()
}

// settled reports whether the rate of the last span is within
// settleTolerance of the span before it (and of target, when the cell
// publishes at a rate), once minWarmup has passed.
func settled(ss []sample, minWarmup time.Duration, target float64) bool {
	return settledOver(ss, minWarmup, target, settleSpan)
}

// settledOver is settled with spans of span.
func settledOver(ss []sample, minWarmup time.Duration, target float64, span time.Duration) bool {
	if len(ss) < 2 {
		return false
	}
	now := ss[len(ss)-1]
	if now.at < minWarmup || now.at < 2*span {
		return false
	}
	mid, old := sampleAt(ss, now.at-span), sampleAt(ss, now.at-2*span)
	recent, before := rateBetween(mid, now), rateBetween(old, mid)
	if recent <= 0 || before <= 0 || math.Abs(recent/before-1) > settleTolerance {
		return false
	}
	return target <= 0 || (math.Abs(recent/target-1) <= settleTolerance && math.Abs(before/target-1) <= settleTolerance)
}

// sampleAt is the latest of ss at or before t (the first when none is).
func sampleAt(ss []sample, t time.Duration) sample {
	for i := len(ss) - 1; i >= 0; i-- {
		if ss[i].at <= t {
			return ss[i]
		}
	}
	return ss[0]
}

// recentRate is the rate over the last span of ss; false before a span
// has passed.
func recentRate(ss []sample, span time.Duration) (float64, bool) {
	if len(ss) < 2 || ss[len(ss)-1].at < span {
		return 0, false
	}
	now := ss[len(ss)-1]
	return rateBetween(sampleAt(ss, now.at-span), now), true
}

// judgeWindow describes the measured window from the samples taken in it
// (the first at its start, the last at its end).
func judgeWindow(ss []sample, asked time.Duration, target float64) results.Window {
	w := results.Window{AskedS: asked.Seconds()}
	if len(ss) < 2 {
		w.Why = "no measured window: the stream ended during the warm-up"
		return w
	}
	first, last := ss[0], ss[len(ss)-1]
	w.StartS, w.MeasuredS, w.Events = first.at.Seconds(), (last.at - first.at).Seconds(), last.effects-first.effects
	// Per-second rates over the window (the last partial second left out
	// unless it is all there is).
	var rates []float64
	for i, j := 0, 0; j < len(ss); j++ {
		if ss[j].at-ss[i].at >= time.Second || (j == len(ss)-1 && len(rates) == 0) {
			rates = append(rates, rateBetween(ss[i], ss[j]))
			i = j
		}
	}
	mean, cv := rateShape(rates)
	trend, se, df := results.CommonTrend([][]float64{rates})
	w.RateCV, w.Trend, w.Rates = cv, trend, roundRates(rates)
	trendP := results.ExceedsP(trend, se, steadyTrend, df)
	w.TrendP = &trendP
	med := results.EstimateOf(rates).Median
	stall := stalled(rates, med)
	switch {
	case last.at-first.at < asked-sampleEvery:
		w.Why = fmt.Sprintf("window of %.1fs, shorter than the %.0fs asked", w.MeasuredS, w.AskedS)
	case w.Events < minWindowEvents:
		w.Why = fmt.Sprintf("only %d events took effect in the window: too few for a rate", w.Events)
	case trendP < trendAlpha:
		w.Why = fmt.Sprintf("the rate still trends: %+.0f%% over the window (p %.2g)", 100*trend, trendP)
	case stall >= 0:
		w.Why = fmt.Sprintf("the rate stalled: %.0f events/s in second %d of the window, against a median of %.0f", rates[stall], stall+1, med)
	case target > 0 && mean < (1-settleTolerance)*target:
		w.Why = fmt.Sprintf("falls behind its rate: %.0f of %.0f events/s took effect", mean, target)
	default:
		w.Steady = true
	}
	return w
}

// stalled is the first second of rates below stallFraction of their
// median, or -1.
func stalled(rates []float64, median float64) int {
	for i, r := range rates {
		if r < stallFraction*median {
			return i
		}
	}
	return -1
}

// trendAlpha is the significance at which a window's rate is shown to
// change by more than steadyTrend over it: the one-sided test that the
// least-squares line's change exceeds the tolerance, on the window's
// per-second rates (Student's t, points minus two degrees of freedom).
// A noisy but flat window (a busy machine) has a large fitted change
// that its own scatter explains. The level is strict because a run tests
// many windows (make bench: 20). The earlier rule, a change over 10%
// whose slope had t > 2.5, called 3.9% of windows trending when the
// per-second rates of a real make bench were shuffled (so that nothing
// trended): about every other make bench marked some cell not steady for
// nothing. This test calls 0.23% of the same shuffled windows trending
// (TestShuffledWindowsRarelyTrend).
const trendAlpha = 0.005

// rateShape is the mean of rates and their coefficient of variation.
func rateShape(rates []float64) (mean, cv float64) {
	n := float64(len(rates))
	if n == 0 {
		return 0, 0
	}
	mean = stats.Mean(rates)
	if mean == 0 || n < 2 {
		return mean, 0
	}
	return mean, stats.StdDev(rates) / mean
}

// A steady cell's tables are analysed once this far into its warm-up and
// once this many events took effect: enough rows for the statistics to
// show what the tables hold (one consumer, a key per event), early enough
// that the warm-up's settling sees the plans the window runs on.
const (
	analyzeAfter   = time.Second
	analyzeEffects = 1000
)

// steadyClock drives a steady-state cell: it samples the effects, ends
// the warm-up when the rate settles (telling the tally and the consumers),
// and stops the publisher when the window is up.
type steadyClock struct {
	spec    *workload.Spec
	t       *tally
	cons    consumers
	start   time.Time
	stopPub func()          // ends publishing
	onWarm  func(time.Time) // called when the warm-up ends
	// analyze, when set, gathers the planner statistics of the cell's
	// tables; it is called once, early in the warm-up (analyzeAfter), so
	// that what is measured runs on plans made with statistics, as a
	// production inbox does, not on the guesses an empty, never analysed
	// table gets (inbox.Analyze).
	analyze func(context.Context)
	// pace, when set, is told the effect rate over the last settleSpan at
	// every sample of the warm-up (the backlog bound follows it, and
	// stays where it was when the window starts).
	pace    func(rate float64)
	done    chan struct{} // closed when the clock ends
	window  results.Window
	settled bool
	warmup  time.Duration
	// warmedAt is the end of the warm-up since start (ns; 0 while warming
	// up), for the progress line.
	warmedAt atomic.Int64
}

// phase says where the cell is, for the progress line.
func (k *steadyClock) phase() string {
	el := time.Since(k.start).Round(time.Second)
	w := time.Duration(k.warmedAt.Load())
	if w == 0 {
		return fmt.Sprintf("warming up %s (until the rate settles, at most %s)", el, k.spec.WarmupLimit())
	}
	return fmt.Sprintf("measuring %s of %s", (el - w.Round(time.Second)).Round(time.Second), k.spec.Measure.D())
}

// result is the measured window, a copy: a pointer into the clock would
// keep the clock, and through it the cell's tally, consumers, publisher
// and every chunk it sent, alive in the run's result until the run ends
// (the heap grew by a whole cell's stream with every cell, and the
// collector's work with it, so later rounds ran slower than earlier ones).
func (k *steadyClock) result() *results.Window {
	w := k.window
	return &w
}

// run samples until the window is up or ctx ends.
func (k *steadyClock) run(ctx context.Context) {
	defer close(k.done)
	defer k.stopPub()
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	var warm, window []sample
	limit, measure := k.spec.WarmupLimit(), k.spec.Measure.D()
	var warmEnd time.Duration
	for {
		select {
		case <-ctx.Done():
			k.finish(window, measure)
			return
		case now := <-tick.C:
			s := sample{at: now.Sub(k.start), effects: k.t.c.effects.Load()}
			if warmEnd == 0 {
				if k.analyze != nil && s.at >= analyzeAfter && s.effects >= analyzeEffects {
					go k.analyze(ctx)
					k.analyze = nil
				}
				warm = append(warm, s)
				if r, ok := recentRate(warm, settleSpan); ok && k.pace != nil {
					k.pace(r)
				}
				k.settled = settled(warm, k.spec.Warmup.D(), k.spec.PublishRate)
				if !k.settled && s.at < limit {
					continue
				}
				warmEnd = s.at
				k.warmup = s.at
				k.warmedAt.Store(int64(s.at))
				k.t.effectsAtWarm.Store(s.effects)
				k.t.warmEnd.Store(now.UnixNano())
				k.cons.warm(ctx, now)
				if k.onWarm != nil {
					k.onWarm(now)
				}
				window = append(window, s)
				continue
			}
			window = append(window, s)
			if s.at-warmEnd >= measure {
				k.finish(window, measure)
				return
			}
		}
	}
}

func (k *steadyClock) finish(window []sample, measure time.Duration) {
	k.window = judgeWindow(window, measure, k.spec.PublishRate)
	k.window.WarmupS, k.window.Settled = k.warmup.Seconds(), k.settled
}

// roundRates keeps rates to whole events per second for the result.
func roundRates(rates []float64) []float64 {
	out := make([]float64, len(rates))
	for i, r := range rates {
		out[i] = math.Round(r)
	}
	return out
}
