package results

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestRoundsTrendOnRealScatter: the per-second rates of the 20 windows of
// one make bench (4 cells × 5 rounds, a 2-core host, scatter 6-26%),
// each window shuffled so that nothing trends: the rounds of a cell
// judged together call the cell trending in under 2% of cells
// (RoundsTrendAlpha, 1%, is the level for a change at the 10% margin; a
// window with no trend is far inside it). The same windows with a rise of 40% over
// each window laid on top are called trending in most cells, where each
// round's own test (TrendP < 0.005 on 10 seconds) sees it in few.
func TestRoundsTrendOnRealScatter(t *testing.T) {
	b, err := os.ReadFile("testdata/make-bench-windows.json")
	if err != nil {
		t.Fatal(err)
	}
	var windows []struct {
		Cell  string
		Rates []float64
	}
	if err := json.Unmarshal(b, &windows); err != nil {
		t.Fatal(err)
	}
	byCell := map[string][][]float64{}
	var cells []string
	for _, w := range windows {
		if byCell[w.Cell] == nil {
			cells = append(cells, w.Cell)
		}
		byCell[w.Cell] = append(byCell[w.Cell], w.Rates)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	judge := func(rise float64) (cellHits, roundHits, cellsN, roundsN int) {
		for range 500 {
			for _, c := range cells {
				var rounds []Cell
				for _, w := range byCell[c] {
					per := slices.Clone(w)
					rng.Shuffle(len(per), func(i, j int) { per[i], per[j] = per[j], per[i] })
					for i := range per {
						per[i] *= 1 + rise*(float64(i)/float64(len(per)-1)-0.5)
					}
					trend, se, df := CommonTrend([][]float64{per})
					if ExceedsP(trend, se, SteadyTrend, df) < 0.005 {
						roundHits++
					}
					roundsN++
					rounds = append(rounds, Cell{Window: &Window{Rates: per}})
				}
				if rt := roundsTrend(rounds); rt != nil && rt.P < RoundsTrendAlpha {
					cellHits++
				}
				cellsN++
			}
		}
		return
	}
	hits, _, n, _ := judge(0)
	t.Logf("shuffled: %d of %d cells called trending (%.2f%%)", hits, n, 100*float64(hits)/float64(n))
	if float64(hits) > 0.02*float64(n) {
		t.Errorf("shuffled windows: %d of %d cells called trending, want under 2%%", hits, n)
	}
	hits, roundHits, n, roundsN := judge(0.4)
	t.Logf("rising 40%%: %d of %d cells called trending (%.0f%%); rounds alone %d of %d (%.0f%%)", hits, n, 100*float64(hits)/float64(n), roundHits, roundsN, 100*float64(roundHits)/float64(roundsN))
	if float64(hits) < 0.7*float64(n) {
		t.Errorf("windows rising 40%%: %d of %d cells called trending, want most", hits, n)
	}
}

// TestRoundsThatTrendTogetherAreNotSteady: five rounds, each steady by
// its own test, whose windows all rise by a quarter: the cell says so.
func TestRoundsThatTrendTogetherAreNotSteady(t *testing.T) {
	wobble := []float64{1.1, 0.9, 1.05, 0.95, 1.1, 0.9, 1.05, 0.95, 1.1, 0.9}
	var rounds []Cell
	for r := range 5 {
		rates := make([]float64, len(wobble))
		for i := range rates {
			rates[i] = float64(20000+1000*r) * (0.875 + 0.25*float64(i)/9) * wobble[(i+r)%len(wobble)]
		}
		rounds = append(rounds, Cell{Round: r + 1, Throughput: Throughput{EventsPerS: 20000}, Window: &Window{Steady: true, Rates: rates}})
	}
	c := Aggregate(rounds)
	if c.Stats.Trend == nil || c.Stats.Trend.Rounds != 5 || c.Stats.Trend.Trend < 0.2 || c.Stats.Trend.P >= RoundsTrendAlpha {
		t.Fatalf("rounds rising 25%%: %+v, want a trend over 20%% at p < %v", c.Stats.Trend, RoundsTrendAlpha)
	}
	if got := c.SteadyText(); !strings.HasPrefix(got, "NOT STEADY: the rounds together trend +2") {
		t.Errorf("SteadyText() = %q", got)
	}
	for r := range rounds {
		for i := range wobble {
			rounds[r].Window.Rates[i] = float64(20000+1000*r) * wobble[(i+r)%len(wobble)]
		}
	}
	if c := Aggregate(rounds); c.SteadyText() != "steady" {
		t.Errorf("flat rounds: SteadyText() = %q, want steady (trend %+v)", c.SteadyText(), c.Stats.Trend)
	}
}
