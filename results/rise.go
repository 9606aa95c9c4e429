package results

import "math"

// A cell measured in several rounds can be getting faster from round to
// round: a JVM broker still compiling its hot paths, caches still
// filling. Each round's window test sees only its own seconds, so a rise
// spread over the rounds slips between them, and the median of such a
// cell is a picture of the warm-up. RoundsRise judges the rounds' rates
// in the order they ran with Mann-Kendall's trend test, exact for the few
// rounds a run has: S counts the pairs of rounds whose later one was
// faster minus those whose later one was slower; under no trend every
// order of the rates is equally likely, and P is the share of orders
// whose S is at least as large. A cell whose rounds rose with P at or
// below RoundsRiseAlpha is not steady: still warming up.

// RoundsRiseAlpha is the false-alarm rate the rise test allows per cell:
// with five rounds only a rise in every round is flagged (1 order in 120).
const RoundsRiseAlpha = 0.01

// MinRiseRounds is the fewest rounds in which a rise can be told from
// chance at RoundsRiseAlpha (4 rounds: 1 order in 24).
const MinRiseRounds = 5

// RoundsSpreadMax is how far a cell's rounds may spread its median
// events/s (Estimate.Spread, the ± the tables print) and still make a
// figure. Beyond ±10% the rounds disagree: a second run on the same
// stack lands anywhere in that interval, so the cell is not steady even
// when no round rose and every window was steady on its own. Two make
// bench in a row on one stack moved RabbitMQ's median by +13% and
// Kafka's by +14% when the first run had printed ±32% and ±22% and
// called both steady (docs/measurements.md).
const RoundsSpreadMax = 0.10

// minDisagreeRounds: two rounds make no interval worth the name (its
// confidence is 50%).
const minDisagreeRounds = 3

// disagree reports whether e's rounds spread its median beyond
// ±RoundsSpreadMax, judged on the whole percent the tables print (a
// "±10%" is within it).
func disagree(e Estimate) bool {
	return e.N >= minDisagreeRounds && math.Round(100*e.Spread()) > math.Round(100*RoundsSpreadMax)
}

// RoundsRise is the rise test of a cell's rounds.
type RoundsRise struct {
	// Rise is the last round's rate over the first's, minus one (+0.75:
	// three quarters faster by the end); S the Mann-Kendall statistic, P
	// its one-sided p-value; Rounds how many rounds were judged.
	Rise   float64 `json:"rise"`
	S      int     `json:"s"`
	P      float64 `json:"p"`
	Rounds int     `json:"rounds"`
	// Warming says the rounds rose beyond chance (P ≤ RoundsRiseAlpha).
	Warming bool `json:"warming"`
}

// RiseOf tests rates, in the order the rounds ran; nil with fewer than
// MinRiseRounds rates.
func RiseOf(rates []float64) *RoundsRise {
	n := len(rates)
	if n < MinRiseRounds || rates[0] <= 0 {
		return nil
	}
	s := 0
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			switch {
			case rates[j] > rates[i]:
				s++
			case rates[j] < rates[i]:
				s--
			}
		}
	}
	p := kendallP(n, s)
	return &RoundsRise{Rise: rates[n-1]/rates[0] - 1, S: s, P: p, Rounds: n, Warming: p <= RoundsRiseAlpha}
}

// kendallP is P(S ≥ s) over the n! equally likely orders of n distinct
// values. S = N − 2·inversions with N = n(n−1)/2 pairs, so it counts the
// orders with at most (N−s)/2 inversions: the Mahonian numbers, built
// row by row.
func kendallP(n, s int) float64 {
	pairs := n * (n - 1) / 2
	maxInv := (pairs - s) / 2
	if maxInv < 0 {
		return 0
	}
	// counts[k]: orders of the first m values with k inversions.
	counts := []float64{1}
	for m := 2; m <= n; m++ {
		next := make([]float64, len(counts)+m-1)
		for k, c := range counts {
			for add := 0; add < m; add++ { // the m-th value placed before add of the others
				next[k+add] += c
			}
		}
		counts = next
	}
	var below, all float64
	for k, c := range counts {
		all += c
		if k <= maxInv {
			below += c
		}
	}
	return math.Min(1, below/all)
}
