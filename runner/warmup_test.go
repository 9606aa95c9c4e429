package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// warmCell is a warm-up round of a cell that passed at rate.
func warmCell(rate float64) results.Cell {
	c := results.Cell{Invariants: results.Invariants{Verdict: results.VerdictPass}}
	c.Throughput.EventsPerS = rate
	return c
}

// warmUpOn runs wu's warm-up rounds on rates: each cell's round i
// measures rates[cell][i] (the last one again past the end). It returns
// how many rounds each cell ran.
func warmUpOn(t *testing.T, wu *warmup, rates map[cellKey][]float64) map[cellKey]int {
	t.Helper()
	ran := map[cellKey]int{}
	for w := 1; !wu.done(); w++ {
		if w > 20 {
			t.Fatal("the warm-up did not end in 20 rounds")
		}
		for _, k := range roundOrder(wu.order, w) {
			if !wu.runs(k) {
				continue
			}
			rs := rates[k]
			wu.record(k, warmCell(rs[min(ran[k], len(rs)-1)]), time.Second)
			ran[k]++
		}
	}
	return ran
}

// TestWarmupEndsWhenTheRateStopsRising: fed the rounds of the issue's
// first make bench (a fresh stack), RocketMQ — +38%, +16%, then +4.5% —
// warms up for four rounds; none and RabbitMQ, which moved both ways,
// for the two it takes to see that; and a cell that rose once by chance
// for three. Each cell leaves the warm-up when it is done.
func TestWarmupEndsWhenTheRateStopsRising(t *testing.T) {
	none, rabbit, kafka, rocket := cellKey{"none", "batch"}, cellKey{"rabbitmq", "batch"}, cellKey{"kafka", "batch"}, cellKey{"rocketmq", "batch"}
	cells := []cellKey{none, rabbit, kafka, rocket}
	wu := newWarmup(&Options{WarmupRounds: 1, WarmupFor: time.Hour}, cells)
	ran := warmUpOn(t, wu, map[cellKey][]float64{
		none:   {30417, 29686, 33598},
		rabbit: {4947, 4128},
		kafka:  {15386, 17818, 17624},
		rocket: {9344, 12897, 14984, 15658, 16372},
	})
	want := map[cellKey]int{none: 2, rabbit: 2, kafka: 3, rocket: 4}
	for _, k := range cells {
		w := wu.cells[k]
		if ran[k] != want[k] || w.Rounds != want[k] || w.Ended != results.WarmupSettled || len(w.Rates) != want[k] {
			t.Errorf("%s: %d rounds (%+v), want %d, settled", k.broker, ran[k], *w, want[k])
		}
	}
	ws, most := wu.result()
	if most != 4 || len(ws) != 4 || ws[3].Broker != "rocketmq" {
		t.Errorf("result: %+v, most %d", ws, most)
	}
	if txt := ws[3].Text(); !strings.Contains(txt, "4 warm-up round(s)") || !strings.Contains(txt, "9,344 → 12,897 → 14,984 → 15,658") || !strings.Contains(txt, "settled (+4%") {
		t.Errorf("text: %s", txt)
	}
}

// TestWarmupRule: the rule round by round.
func TestWarmupRule(t *testing.T) {
	pass, fail := results.VerdictPass, results.VerdictFail
	for _, tc := range []struct {
		rates    []float64
		verdict  results.Verdict
		min      int
		adaptive bool
		want     results.WarmupEnd
	}{
		{[]float64{9344}, pass, 2, true, ""},
		{[]float64{9344, 12897}, pass, 2, true, ""},
		{[]float64{9344, 12897, 14984}, pass, 2, true, ""},
		{[]float64{9344, 12897, 14984, 15658}, pass, 2, true, results.WarmupSettled},
		{[]float64{1000, 1100}, pass, 2, true, results.WarmupSettled}, // +10%: no more than the scatter
		{[]float64{1000, 1101}, pass, 2, true, ""},                    // just over
		{[]float64{1000, 900}, pass, 3, true, ""},                     // slower, but fewer than the rounds asked
		{[]float64{1000, 900, 950}, pass, 3, true, results.WarmupSettled},
		{[]float64{1000}, pass, 1, false, results.WarmupCount}, // a fixed count
		{[]float64{1000, 2000}, pass, 3, false, ""},            // a fixed count of three
		{[]float64{1000, 2000, 4000}, pass, 3, false, results.WarmupCount},
		{[]float64{1000}, fail, 2, true, results.WarmupFailed},
		{[]float64{0}, pass, 2, true, results.WarmupFailed},
	} {
		if got := warmupEnd(tc.rates, tc.verdict, tc.min, tc.adaptive); got != tc.want {
			t.Errorf("%v %s min %d adaptive %v: %q, want %q", tc.rates, tc.verdict, tc.min, tc.adaptive, got, tc.want)
		}
	}
}

// TestWarmupBoundedInTime: a cell that keeps rising runs no warm-up
// round that would end past the warm-up's time (as long as its last
// one), and says it still rose; a fixed count knows no time.
func TestWarmupBoundedInTime(t *testing.T) {
	k := cellKey{"rocketmq", "batch"}
	wu := newWarmup(&Options{WarmupRounds: 1, WarmupFor: time.Minute}, []cellKey{k})
	if wu.min != minWarmupRounds {
		t.Errorf("min %d: an adaptive warm-up needs %d rounds to compare", wu.min, minWarmupRounds)
	}
	wu.record(k, warmCell(1000), 20*time.Second)
	wu.record(k, warmCell(2000), 20*time.Second)
	wu.start = time.Now().Add(-30 * time.Second)
	if !wu.runs(k) {
		t.Fatal("a round of 20 s more fits the minute, yet the cell stopped")
	}
	wu.start = time.Now().Add(-45 * time.Second)
	if wu.runs(k) || wu.cells[k].Ended != results.WarmupTime || !wu.done() {
		t.Fatalf("a round of 20 s more would end past the minute, yet the cell warms up: %+v", *wu.cells[k])
	}
	if txt := wu.cells[k].Text(); !strings.Contains(txt, "STILL RISING") || !strings.Contains(txt, "+100%") {
		t.Errorf("text: %s", txt)
	}
	fixed := newWarmup(&Options{WarmupRounds: 2}, []cellKey{k})
	fixed.start = time.Now().Add(-time.Hour)
	fixed.record(k, warmCell(1000), time.Hour)
	if !fixed.runs(k) {
		t.Error("a fixed count stopped at a time")
	}
	stopped := newWarmup(&Options{WarmupRounds: 1, WarmupFor: time.Hour}, []cellKey{k})
	stopped.record(k, warmCell(1000), time.Second)
	if ws, _ := stopped.result(); len(ws) != 1 || ws[0].Ended != results.WarmupStopped {
		t.Errorf("a run stopped during its warm-up: %+v", ws)
	}
	if newWarmup(&Options{WarmupRounds: 0, WarmupFor: time.Hour}, []cellKey{k}) != nil {
		t.Error("no warm-up rounds asked, yet a warm-up")
	}
}
