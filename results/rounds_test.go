package results

import (
	"strings"
	"testing"
)

func roundCell(r int, rate float64, verdict Verdict, steady bool) Cell {
	return Cell{Broker: "kafka", Strategy: "tx", Round: r, Order: r, Schema: "s" + string(rune('0'+r)),
		Throughput: Throughput{EventsPerS: rate, VsBaseline: rate / 1000, Series: []float64{rate}, Bound: BoundConsume},
		Latency:    Latencies{E2E: Summary{Count: 10, P50: int64(rate), P99: int64(2 * rate)}},
		Counters:   Counters{Published: 100, Effects: 100},
		Invariants: Invariants{Verdict: verdict, Anomalies: map[string]int64{}, Examples: map[string][]string{}},
		Window:     &Window{Steady: steady, Why: map[bool]string{false: "the rate still trends"}[steady]},
		Notes:      []string{"every round", "round " + string(rune('0'+r))}}
}

func TestAggregateRounds(t *testing.T) {
	rounds := []Cell{roundCell(1, 900, VerdictPass, true), roundCell(2, 1100, VerdictPass, true), roundCell(3, 1000, VerdictPass, false)}
	rounds[1].Invariants.Anomalies["lost-effect"] = 2
	rounds[1].Invariants.Examples["lost-effect"] = []string{"acct-1 v3"}
	rounds[1].Invariants.Verdict = VerdictFail
	c := Aggregate(rounds)
	if c.Throughput.EventsPerS != 1000 || c.Stats == nil || c.Stats.EventsPerS.N != 3 || c.Stats.EventsPerS.Lo != 900 || c.Stats.EventsPerS.Hi != 1100 {
		t.Fatalf("events/s %v, stats %+v: want the median 1000 over [900, 1100]", c.Throughput.EventsPerS, c.Stats)
	}
	if c.Throughput.VsBaseline != 1 || c.Stats.VsBaseline == nil || c.Stats.VsBaseline.Median != 1 {
		t.Errorf("vs baseline %v %+v, want the median ratio 1", c.Throughput.VsBaseline, c.Stats.VsBaseline)
	}
	if c.Counters.Effects != 300 || c.Invariants.Verdict != VerdictFail || c.Invariants.Anomalies["lost-effect"] != 2 ||
		!strings.HasPrefix(c.Invariants.Examples["lost-effect"][0], "round 2: ") {
		t.Errorf("counters %+v, invariants %+v: want sums and the worst verdict", c.Counters, c.Invariants)
	}
	if c.Latency.E2E.P99 != 2000 || c.Latency.E2E.Count != 30 {
		t.Errorf("e2e %+v: want the median p99 2000 and the summed count", c.Latency.E2E)
	}
	if c.Stats.NotSteady != 1 || c.SteadyText() != "NOT STEADY in 1 of 3 rounds" {
		t.Errorf("not steady %d, %q", c.Stats.NotSteady, c.SteadyText())
	}
	if c.Round != 0 || len(c.Rounds) != 3 || c.Throughput.Series[0] != 1000 {
		t.Errorf("round %d, %d rounds, series %v: want the median round's series", c.Round, len(c.Rounds), c.Throughput.Series)
	}
	if len(c.Notes) != 4 || c.Notes[0] != "every round" || c.Notes[1] != "round 1: round 1" {
		t.Errorf("notes %q", c.Notes)
	}
	if got := c.RoundValues(func(r *Cell) float64 { return r.Throughput.EventsPerS }); len(got) != 3 || got[1] != 1100 {
		t.Errorf("RoundValues %v", got)
	}
	one := roundCell(1, 500, VerdictPass, true)
	if a := Aggregate([]Cell{one}); a.Stats != nil || a.Round != 1 {
		t.Errorf("one round must come back as it is: %+v", a)
	}
}

// TestAggregateDisagree: the first of two make bench in a row on one
// stack (805db6c). Every window was steady and no cell rose, yet the
// second run moved RabbitMQ's median by +13% and Kafka's by +14%: the
// first run's rounds spread them ±32% and ±22%, and the cells whose
// rounds reach beyond ±10% are not steady — the rounds disagree. None's
// rounds (±6%) make a figure, and so do three or more rounds within ±10%;
// two rounds make no interval worth judging.
func TestAggregateDisagree(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rates    []float64
		disagree bool
	}{
		{"none", []float64{37757, 35546, 35560, 34371, 37533}, false},
		{"rabbitmq", []float64{5106, 3884, 4728, 6319, 6734}, true},
		{"kafka", []float64{20343, 20685, 19301, 18414, 24883}, true},
		{"rocketmq", []float64{14932, 15253, 16719, 18849, 17189}, true},
		{"within 10%", []float64{100, 109, 95, 91, 104}, false},
		{"10.4% prints as ±10%", []float64{100, 110.4, 95, 91, 104}, false},
		{"10.6% prints as ±11%", []float64{100, 110.6, 95, 91, 104}, true},
		{"two rounds", []float64{100, 150}, false},
		{"three rounds", []float64{100, 150, 120}, true},
	} {
		var rounds []Cell
		for i, r := range tc.rates {
			rounds = append(rounds, roundCell(i+1, r, VerdictPass, true))
		}
		c := Aggregate(rounds)
		text := c.SteadyText()
		if c.Stats.Disagree != tc.disagree || strings.HasPrefix(text, "NOT STEADY — rounds disagree") != tc.disagree {
			t.Errorf("%s: disagree %v, %q (spread ±%.1f%%), want disagree %v", tc.name, c.Stats.Disagree, text, 100*c.Stats.EventsPerS.Spread(), tc.disagree)
		}
		if !tc.disagree && text != "steady" {
			t.Errorf("%s: %q, want steady", tc.name, text)
		}
	}
}

// TestAggregateRise: the rounds of the first make bench, each
// window steady on its own. RocketMQ rose in every round (+75%): the
// cell is not steady — still warming up, with the rise, in its stats and
// its window text, and the run's tables get their window column even for
// cells run for their events. Its second run, and a failed warm-up round
// kept before the measured ones (round 0, slower than all of them), are
// not a rise.
func TestAggregateRise(t *testing.T) {
	cells := func(rates ...float64) []Cell {
		var out []Cell
		for i, r := range rates {
			out = append(out, roundCell(i+1, r, VerdictPass, true))
		}
		return out
	}
	first := Aggregate(cells(9344, 12897, 14984, 15658, 16372))
	r := first.Stats.Rise
	if r == nil || !r.Warming || r.Rounds != 5 || !first.Warming() {
		t.Fatalf("rise %+v: want warming over 5 rounds", r)
	}
	if got, want := first.SteadyText(), "NOT STEADY — still warming up: +75% over 5 rounds (p 0.0083)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	// The second run did not rise, but one round (+13%) reaches beyond
	// ±RoundsSpreadMax: its rounds disagree.
	second := Aggregate(cells(15232, 17263, 15335, 14401, 15390))
	if got, want := second.SteadyText(), "NOT STEADY — rounds disagree: ±13%"; second.Warming() || got != want {
		t.Errorf("second run: %+v, %q, want %q", second.Stats.Rise, got, want)
	}
	warm := roundCell(0, 3000, VerdictFail, true)
	kept := Aggregate(append([]Cell{warm}, cells(15232, 17263, 15335, 14401, 15390)...))
	if kept.Stats.Rise == nil || kept.Stats.Rise.Rounds != 5 || kept.Warming() {
		t.Errorf("with a kept warm-up round: %+v", kept.Stats.Rise)
	}
	if few := Aggregate(cells(1, 2, 3, 4)); few.Stats.Rise != nil {
		t.Errorf("four rounds: %+v, want no verdict", few.Stats.Rise)
	}
	first.Window = nil
	for i := range first.Rounds {
		first.Rounds[i].Window = nil
	}
	run := &Run{Cells: []Cell{first}}
	if !run.SteadyCells() || !strings.HasPrefix(first.SteadyText(), "NOT STEADY — still warming up") {
		t.Errorf("a warming cell run for its events: column %v, %q", run.SteadyCells(), first.SteadyText())
	}
}

// TestAggregateSumsCalls: a cell's external calls and a service's kills
// are the sums over its rounds, the median round's left unchanged.
func TestAggregateSumsCalls(t *testing.T) {
	rounds := []Cell{roundCell(1, 900, VerdictPass, true), roundCell(2, 1100, VerdictPass, true), roundCell(3, 1000, VerdictPass, true)}
	for i := range rounds {
		n := int64(i + 1)
		rounds[i].External = &External{Calls: n, Effects: n, Replays: 1, Conflicts: 0, Refused: n, TimedOut: 1, Queries: 2}
		rounds[i].Service = &ServiceRun{Kills: n, Exits: 1}
	}
	c := Aggregate(rounds)
	want := External{Calls: 6, Effects: 6, Replays: 3, Refused: 6, TimedOut: 3, Queries: 6}
	if c.External == nil || *c.External != want {
		t.Errorf("external %+v, want %+v", c.External, want)
	}
	if c.Service == nil || c.Service.Kills != 6 || c.Service.Exits != 3 {
		t.Errorf("service %+v, want 6 kills and 3 exits", c.Service)
	}
	if rounds[2].External.Calls != 3 || rounds[2].Service.Kills != 3 {
		t.Errorf("the median round changed: %+v %+v", rounds[2].External, rounds[2].Service)
	}
}
