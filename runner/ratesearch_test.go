package runner

import (
	"math"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// TestSearcherConverges drives the search against simulated systems with
// a known capacity: it must end within its precision below the capacity,
// in a bounded number of steps, naming the limit.
func TestSearcherConverges(t *testing.T) {
	o := DefaultRateSearch.withDefaults()
	o.MaxTime = time.Hour
	for _, capacity := range []float64{37, 800, 2600, 23_456, 150_000} {
		s := newSearcher(o)
		for {
			rate, _, ok := s.next()
			if !ok {
				break
			}
			st := results.RateStep{Rate: rate, Achieved: rate}
			if rate > capacity {
				st.BacklogSlope = rate - capacity
			}
			o.judgeStep(&st)
			s.record(st)
		}
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
	s := newSearcher(o)
	for {
		rate, _, ok := s.next()
		if !ok {
			break
		}
		st := results.RateStep{Rate: rate, Achieved: rate}
		// Above capacity by up to 15%, the first step at a rate passes.
		if rate > capacity && (rate > capacity*1.15 || lucky[rate]) {
			st.BacklogSlope = rate
		}
		lucky[rate] = true
		o.judgeStep(&st)
		s.record(st)
	}
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
