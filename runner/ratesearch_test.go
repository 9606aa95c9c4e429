package runner

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// drive runs a search to its end against a simulated system whose
// backlog grows by backlog(rate) events/s at a rate (and is otherwise
// perfect).
func drive(o RateSearch, backlog func(rate float64) float64) *searcher {
	s := newSearcher(o)
	for {
		rate, _, ok := s.next()
		if !ok {
			return s
		}
		st := results.RateStep{Rate: rate, Achieved: rate, BacklogSlope: backlog(rate)}
		o.judgeStep(&st)
		s.record(st)
	}
}

// TestSearcherConverges drives the search against simulated systems with
// a known capacity: it must end within its precision below the capacity,
// in a bounded number of steps, naming the limit.
func TestSearcherConverges(t *testing.T) {
	o := DefaultRateSearch.withDefaults()
	o.MaxTime = time.Hour
	for _, capacity := range []float64{37, 800, 2600, 23_456, 150_000} {
		s := drive(o, func(rate float64) float64 { return max(rate-capacity, 0) })
		// The backlog may grow by MaxBacklogGrowth of the rate: the
		// highest sustainable rate is capacity/(1-growth).
		edge := capacity / (1 - o.MaxBacklogGrowth)
		msr, limit, confirmed, _ := s.result()
		if msr > edge || msr < edge/(1+o.Precision)-1 || limit != results.LimitBacklog || !confirmed {
			t.Errorf("capacity %.0f: MSR %.0f limited by %q after %d steps", capacity, msr, limit, s.steps)
		}
		if s.steps > o.MaxSteps {
			t.Errorf("capacity %.0f: %d steps", capacity, s.steps)
		}
	}
}

// TestSearcherStopsAtItsBounds: a system faster than every step the
// search may take says so rather than inventing a limit.
func TestSearcherStopsAtItsBounds(t *testing.T) {
	o := DefaultRateSearch.withDefaults()
	o.MaxSteps = 3
	s := newSearcher(o)
	for {
		rate, _, ok := s.next()
		if !ok {
			break
		}
		s.record(results.RateStep{Rate: rate, Achieved: rate, Sustainable: true})
	}
	msr, limit, confirmed, why := s.result()
	if msr != 2000 || limit != results.LimitSteps || confirmed || why == "" {
		t.Fatalf("MSR %.0f limited by %q (confirmed %v, %q), want 2000 by steps, unconfirmed", msr, limit, confirmed, why)
	}
}

// TestSearcherConfirmsItsAnswer: a step that was sustainable by luck (a
// noisy machine) does not become the MSR: the bracket's end is measured
// again, and a failed confirmation moves the search below it.
func TestSearcherConfirmsItsAnswer(t *testing.T) {
	o := DefaultRateSearch.withDefaults()
	o.MaxTime = time.Hour
	const capacity = 10_000
	lucky := map[float64]bool{}
	s := drive(o, func(rate float64) float64 {
		// Above capacity by up to 15%, the first step at a rate passes.
		fails := rate > capacity && (rate > capacity*1.15 || lucky[rate])
		lucky[rate] = true
		if fails {
			return rate
		}
		return 0
	})
	msr, _, confirmed, _ := s.result()
	if msr > capacity || msr < capacity/(1+o.Precision)-1 || !confirmed {
		t.Fatalf("MSR %.0f (confirmed %v) after %d steps: want at most the capacity %d, within precision", msr, confirmed, s.steps, capacity)
	}
}

func TestJudgeStep(t *testing.T) {
	o := DefaultRateSearch.withDefaults()
	for _, tc := range []struct {
		st   results.RateStep
		want results.Limit
	}{
		{results.RateStep{Rate: 1000, Achieved: 999, BacklogSlope: 3}, ""},
		{results.RateStep{Rate: 1000, Achieved: 900}, results.LimitPublish},
		{results.RateStep{Rate: 1000, Achieved: 1000, PublishLagMs: 1500}, results.LimitPublish},
		{results.RateStep{Rate: 1000, Achieved: 1000, BacklogSlope: 80}, results.LimitBacklog},
		{results.RateStep{Rate: 1000, Achieved: 1000, E2E: results.Summary{Count: 1, P99: 2_000_000}}, results.LimitP99},
	} {
		o.judgeStep(&tc.st)
		if tc.st.Limit != tc.want || tc.st.Sustainable != (tc.want == "") {
			t.Errorf("%+v: limit %q, want %q", tc.st, tc.st.Limit, tc.want)
		}
	}
}

func TestBacklogSlope(t *testing.T) {
	var ts, vs []float64
	for i := range 50 {
		x := float64(i) / 10
		ts, vs = append(ts, x), append(vs, 100+250*x+20*math.Sin(float64(i)))
	}
	if s := backlogSlope(ts, vs); math.Abs(s-250) > 10 {
		t.Fatalf("slope %.1f, want about 250", s)
	}
	if backlogSlope(ts[:1], vs[:1]) != 0 {
		t.Fatal("one sample has no slope")
	}
}

// TestSearcherRechecksAContradiction: a system that sustains up to its
// capacity, whose first step at 80% of it fails (a stall), and a system
// whose capacity the search overshot by luck: a step below the
// MSR that fails is measured again; a fluke leaves the MSR alone, a
// confirmed failure moves the MSR below it.
func TestSearcherRechecksAContradiction(t *testing.T) {
	o := DefaultRateSearch.withDefaults()
	o.MaxTime = time.Hour
	run := func(fails func(rate float64, n int) bool) (*searcher, []string) {
		s := newSearcher(o)
		seen := map[float64]int{}
		var phases []string
		for {
			rate, phase, ok := s.next()
			if !ok {
				// What the cell does then: steps at fractions of the MSR.
				msr, _, _, _ := s.result()
				at := math.Round(0.8 * msr)
				if msr == 0 || seen[at] > 0 {
					return s, phases
				}
				rate, phase = at, "at"
			}
			seen[rate]++
			st := results.RateStep{Phase: phase, Rate: rate, Achieved: rate}
			if fails(rate, seen[rate]) {
				st.E2E = results.Summary{Count: 1, P99: 2 * o.MaxP99.Microseconds()}
			}
			o.judgeStep(&st)
			s.record(st)
			phases = append(phases, phase)
		}
	}
	const capacity = 10_000
	// A fluke: the first step between 7,000 and 8,000/s (80% of the
	// MSR, as it turns out) stalls.
	s, phases := run(func(r float64, n int) bool { return r > capacity || (r > 7000 && r < 8000 && n == 1) })
	msr, _, confirmed, why := s.result()
	if msr < capacity/(1+o.Precision)-1 || msr > capacity || !confirmed || !slices.Contains(phases, "recheck") {
		t.Fatalf("fluke: MSR %.0f (confirmed %v, %q), phases %v: want the capacity, after a recheck", msr, confirmed, why, phases)
	}
	// A failed confirmation (a tie) is broken by a third step.
	s, phases = run(func(r float64, n int) bool { return r > capacity || (r > 9000 && n == 2) })
	msr, _, confirmed, _ = s.result()
	if msr < capacity/(1+o.Precision)-1 || msr > capacity || !confirmed || !slices.Contains(phases, "recheck") {
		t.Fatalf("tie: MSR %.0f (confirmed %v), phases %v: want the capacity, after a recheck", msr, confirmed, phases)
	}
	// An overshoot: every rate from 6,000/s fails but the two first steps
	// at 8,000/s (the ramp's and its confirmation), so 80% of that MSR
	// fails twice.
	s, phases = run(func(r float64, n int) bool { return r >= 6000 && !(r == 8000 && n <= 2) })
	msr, _, confirmed, _ = s.result()
	if msr >= 6000 || msr < 6000/(1+o.Precision)-1 || !confirmed {
		t.Fatalf("overshoot: MSR %.0f (confirmed %v), phases %v: want just under 6,000", msr, confirmed, phases)
	}
}
