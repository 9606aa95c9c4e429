package runner

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// The rate search separates the two questions a saturated run mixes up:
// what rate a setup sustains, and what latency it gives at a rate. A cell
// runs open-loop steps at rising rates (doubling from StartRate), then
// bisects between the highest sustainable and the lowest unsustainable
// step until they are within Precision; the maximum sustainable rate
// (MSR) is the highest sustainable step. Then it measures steps at fixed
// fractions of the MSR. Each step publishes a fresh segment of the
// workload (its own aggregates) through the same topic, consumers and
// schema, is drained before the next one, and everything is judged
// together at the end.
//
// A step is sustainable when the publisher kept its schedule (achieved
// rate ≥ 95% of the step's, publish lag ≤ MaxPublishLag), the backlog did
// not grow over the measured window (least-squares slope ≤
// MaxBacklogGrowth × rate) and e2e p99 stayed ≤ MaxP99. Decisions depend
// only on those measurements, so the search converges (each step halves
// the bracket) and a repeated run lands within the measurements' noise.

// RateSearch configures a cell's search for its maximum sustainable rate.
type RateSearch struct {
	// Step is how long each step publishes; its first Warmup is not
	// measured (the consumers settle to the new rate).
	Step, Warmup time.Duration
	// Criteria of a sustainable step.
	MaxBacklogGrowth float64
	MaxPublishLag    time.Duration
	MaxP99           time.Duration
	// Precision ends the bisection; StartRate is the first step's rate.
	Precision float64
	StartRate float64
	// MaxSteps and MaxTime bound the search of one cell (every step
	// counts, the ones at fractions of the MSR too).
	MaxSteps int
	MaxTime  time.Duration
	// Fractions of the MSR, and absolute Rates, to measure latency at.
	Fractions []float64
	Rates     []float64
}

// DefaultRateSearch is what a rate search uses unless told otherwise.
var DefaultRateSearch = RateSearch{Step: 8 * time.Second, Warmup: 2 * time.Second, MaxBacklogGrowth: 0.05,
	MaxPublishLag: 100 * time.Millisecond, MaxP99: time.Second, Precision: 0.05, StartRate: 500, MaxSteps: 30,
	MaxTime: 8 * time.Minute, Fractions: []float64{0.5, 0.8, 0.95}}

// minRate is the slowest step the search tries.
const minRate = 10

func (r RateSearch) withDefaults() RateSearch {
	d := DefaultRateSearch
	pick := func(v *float64, def float64) {
		if *v <= 0 {
			*v = def
		}
	}
	if r.Step <= 0 {
		r.Step = d.Step
	}
	if r.Warmup <= 0 || r.Warmup >= r.Step {
		r.Warmup = min(d.Warmup, r.Step/4)
	}
	pick(&r.MaxBacklogGrowth, d.MaxBacklogGrowth)
	pick(&r.Precision, d.Precision)
	pick(&r.StartRate, d.StartRate)
	if r.MaxPublishLag <= 0 {
		r.MaxPublishLag = d.MaxPublishLag
	}
	if r.MaxP99 <= 0 {
		r.MaxP99 = d.MaxP99
	}
	if r.MaxSteps <= 0 {
		r.MaxSteps = d.MaxSteps
	}
	if r.MaxTime <= 0 {
		r.MaxTime = d.MaxTime
	}
	if r.Fractions == nil && r.Rates == nil {
		r.Fractions = d.Fractions
	}
	return r
}

func (r RateSearch) validate() error {
	for _, f := range r.Fractions {
		if !(f > 0 && f <= 1) {
			return config.Invalid(KeySearchFractions, f, "each must be above 0 and at most 1")
		}
	}
	for _, v := range r.Rates {
		if !(v >= minRate) || math.IsInf(v, 0) {
			return config.Invalid(KeySearchRates, v, "each must be at least %d events/s", minRate)
		}
	}
	if r.MaxBacklogGrowth > 1 {
		return config.Invalid(KeySearchMaxBacklogGrowth, r.MaxBacklogGrowth, "a share of the rate: at most 1")
	}
	if r.Precision > 1 {
		return config.Invalid(KeySearchPrecision, r.Precision, "a share of the rate: at most 1")
	}
	return nil
}

func (r RateSearch) criteria() results.RateCriteria {
	return results.RateCriteria{StepS: r.Step.Seconds(), MaxBacklogGrowth: r.MaxBacklogGrowth,
		MaxPublishLagMs: float64(r.MaxPublishLag) / float64(time.Millisecond), MaxP99Us: r.MaxP99.Microseconds(), Precision: r.Precision}
}

// judgeStep says whether a measured step was sustainable, and if not which
// criterion it failed, in the order that names the bottleneck: the
// publisher (the broker did not take the rate) before the backlog (the
// consumers did not keep up) before latency.
func (r RateSearch) judgeStep(st *results.RateStep) {
	switch {
	case st.Achieved < 0.95*st.Rate || st.PublishLagMs > float64(r.MaxPublishLag)/float64(time.Millisecond):
		st.Limit = results.LimitPublish
	case st.BacklogSlope > r.MaxBacklogGrowth*st.Rate:
		st.Limit = results.LimitBacklog
	case st.E2E.P99 > r.MaxP99.Microseconds():
		st.Limit = results.LimitP99
	}
	st.Sustainable = st.Limit == ""
}

// searcher picks the next step's rate from what the steps found. A rate
// may be measured more than once: its verdict is the majority of its
// steps (a tie counts as not sustainable). Once the bracket is within
// Precision, its sustainable end is measured again ("confirm") until it
// was sustainable twice; a confirmation that fails moves the bracket
// down, and the search goes on from there. So a lucky step cannot become
// the MSR, and the MSR reported was sustainable when measured again.
//
// A rate that is not sustainable below one that is contradicts the
// search (a system that holds a rate holds every lower one): it is
// measured again ("recheck") until two of its steps agree; so is a rate
// whose steps are tied (a failed confirmation). Confirmed
// unsustainable, it is the bracket's upper end, and the search goes on
// below it; so a step at a fraction of the MSR that fails (they are
// recorded too) either was a fluke or moves the MSR below it.
type searcher struct {
	o        RateSearch
	verdicts map[float64][]results.RateStep // by rate, in the order measured
	lo, hi   float64                        // highest sustainable, lowest unsustainable above it (0: none yet)
	limit    results.Limit                  // the hi rate's latest failed criterion
	steps    int
	start    time.Time
	// stopped says why the search ended before it was done.
	stopped results.Limit
}

func newSearcher(o RateSearch) *searcher {
	return &searcher{o: o, start: time.Now(), verdicts: map[float64][]results.RateStep{}}
}

// tally counts a rate's sustainable and unsustainable steps.
func (s *searcher) tally(rate float64) (yes, no int) {
	for _, st := range s.verdicts[rate] {
		if st.Sustainable {
			yes++
		} else {
			no++
		}
	}
	return yes, no
}

// sustainable is a rate's verdict: the majority of its steps.
func (s *searcher) sustainable(rate float64) bool {
	yes, no := s.tally(rate)
	return yes > no
}

// next returns the next step's rate and phase, or ok false when done.
func (s *searcher) next() (rate float64, phase string, ok bool) {
	switch {
	case s.steps >= s.o.MaxSteps:
		s.stopped = results.LimitSteps
		return 0, "", false
	case time.Since(s.start) > s.o.MaxTime:
		s.stopped = results.LimitTime
		return 0, "", false
	case s.steps == 0:
		return s.o.StartRate, "ramp", true
	}
	if r, ok := s.contradiction(); ok {
		return r, "recheck", true
	}
	switch {
	case s.hi == 0:
		return s.lo * 2, "ramp", true
	case s.lo == 0:
		if s.hi/2 < minRate {
			s.stopped = results.LimitFloor
			return 0, "", false
		}
		return s.hi / 2, "ramp", true
	case (s.hi-s.lo)/s.lo > s.o.Precision:
		// The geometric mean halves the bracket on a log scale: the
		// right middle for a range that may span a power of ten.
		return math.Round(math.Sqrt(s.lo * s.hi)), "bisect", true
	}
	if yes, _ := s.tally(s.lo); yes < 2 {
		return s.lo, "confirm", true
	}
	return 0, "", false
}

// record takes a judged step and moves the bracket.
func (s *searcher) record(st results.RateStep) {
	s.steps++
	s.verdicts[st.Rate] = append(s.verdicts[st.Rate], st)
	// hi is the lowest rate found unsustainable and not undecided; lo
	// the highest sustainable rate below it.
	s.lo, s.hi = 0, 0
	for r, sts := range s.verdicts {
		if !s.sustainable(r) && (s.hi == 0 || r < s.hi) && !s.undecided(r) {
			s.hi = r
			for _, x := range sts {
				if !x.Sustainable {
					s.limit = x.Limit
				}
			}
		}
	}
	for r := range s.verdicts {
		if s.sustainable(r) && r > s.lo && (s.hi == 0 || r < s.hi) {
			s.lo = r
		}
	}
}

// undecided says whether rate r is unsustainable on too little evidence:
// its steps are tied, or it failed once while a higher rate held.
func (s *searcher) undecided(r float64) bool {
	yes, no := s.tally(r)
	switch {
	case yes > 0 && yes == no:
		return true
	case no >= 2:
		return false
	}
	for q := range s.verdicts {
		if q > r && s.sustainable(q) {
			return true
		}
	}
	return false
}

// contradiction returns the lowest rate found unsustainable below one
// found sustainable, whose verdict is not yet decided by two steps.
func (s *searcher) contradiction() (float64, bool) {
	var low float64
	for r := range s.verdicts {
		if !s.sustainable(r) && s.undecided(r) && (low == 0 || r < low) {
			low = r
		}
	}
	return low, low > 0
}

// result is the search's outcome: the MSR, what limited it, and whether
// it was confirmed (with why not).
func (s *searcher) result() (msr float64, limitedBy results.Limit, confirmed bool, uncertain string) {
	msr = s.lo
	yes, no := s.tally(msr)
	confirmed = msr > 0 && yes >= 2 && yes > no
	var mixed []string
	rates := make([]float64, 0, len(s.verdicts))
	for r := range s.verdicts {
		rates = append(rates, r)
	}
	sort.Float64s(rates)
	for _, r := range rates {
		if y, n := s.tally(r); y > 0 && n > 0 {
			mixed = append(mixed, fmt.Sprintf("%s/s sustainable %d of %d times", results.FormatRate(r), y, y+n))
		}
	}
	switch low, contradicted := s.contradiction(); {
	case msr > 0 && !confirmed:
		uncertain = fmt.Sprintf("the search stopped (%s) before %s/s was measured sustainable twice", s.stopped, results.FormatRate(msr))
	case contradicted:
		uncertain = fmt.Sprintf("the search stopped (%s) before %s/s, not sustainable below the MSR, was measured again", s.stopped, results.FormatRate(low))
	case len(mixed) > 0:
		uncertain = "repeated steps disagreed: " + strings.Join(mixed, "; ")
	}
	switch {
	case s.hi == 0 && s.stopped != "":
		return msr, s.stopped, confirmed, uncertain
	case s.hi == 0:
		return msr, results.LimitSteps, confirmed, uncertain
	}
	return msr, s.limit, confirmed, uncertain
}

// backlogSlope is the least-squares slope, in events/s, of the backlog
// samples (seconds, events).
func backlogSlope(ts, vs []float64) float64 {
	n := float64(len(ts))
	if n < 2 {
		return 0
	}
	var st, sv, stt, stv float64
	for i := range ts {
		st, sv, stt, stv = st+ts[i], sv+vs[i], stt+ts[i]*ts[i], stv+ts[i]*vs[i]
	}
	den := n*stt - st*st
	if den == 0 {
		return 0
	}
	return (n*stv - st*sv) / den
}
