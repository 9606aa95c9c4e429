package results

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRiseOnTheFirstRunsFigures: the rounds of a first make bench on a
// fresh stack (issue figures, main b2dd564). RocketMQ rose in every round
// (+75%): warming. None's rounds moved both ways: steady.
func TestRiseOnTheFirstRunsFigures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rates   []float64
		warming bool
		rise    float64
	}{
		{"rocketmq", []float64{9344, 12897, 14984, 15658, 16372}, true, 0.752},
		{"none", []float64{30417, 34978, 31725, 29686, 33598}, false, 0.105},
		{"rabbitmq", []float64{4047, 4947, 4128, 5769, 4563}, false, 0.128},
		{"rocketmq second run", []float64{15232, 17263, 15335, 14401, 15390}, false, 0.010},
	} {
		r := RiseOf(tc.rates)
		if r == nil || r.Warming != tc.warming || math.Abs(r.Rise-tc.rise) > 0.001 {
			t.Errorf("%s: %+v, want warming=%v rise %.3f", tc.name, r, tc.warming, tc.rise)
		}
	}
	if RiseOf([]float64{1, 2, 3, 4}) != nil {
		t.Error("four rounds cannot show a rise at 1%: no verdict")
	}
}

// TestKendallPExact checks the exact distribution against a count of
// every order of five values.
func TestKendallPExact(t *testing.T) {
	if p := kendallP(5, 10); math.Abs(p-1.0/120) > 1e-12 {
		t.Errorf("P(S=10 | n=5) = %v, want 1/120", p)
	}
	if p := kendallP(5, 8); math.Abs(p-5.0/120) > 1e-12 {
		t.Errorf("P(S≥8 | n=5) = %v, want 5/120", p)
	}
	if p := kendallP(5, -10); p != 1 {
		t.Errorf("P(S≥-10) = %v, want 1", p)
	}
	if p := kendallP(6, 15); math.Abs(p-1.0/720) > 1e-12 {
		t.Errorf("P(S=15 | n=6) = %v, want 1/720", p)
	}
}

// TestRiseFalseAlarms shuffles the figures of every cell above (rounds
// whose order carries no trend) 10,000 times each: at most 1 in 100 may
// be flagged.
func TestRiseFalseAlarms(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	series := [][]float64{{9344, 12897, 14984, 15658, 16372}, {30417, 34978, 31725, 29686, 33598},
		{4047, 4947, 4128, 5769, 4563}, {15386, 17818, 15624, 20305, 21099}, {23517, 25793, 18782, 25121, 20164}}
	flagged, total := 0, 0
	for _, s := range series {
		for range 10000 {
			x := append([]float64(nil), s...)
			rng.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
			total++
			if RiseOf(x).Warming {
				flagged++
			}
		}
	}
	if rate := float64(flagged) / float64(total); rate > 0.01 {
		t.Errorf("%d of %d shuffled series flagged (%.2f%%): more than 1 in 100", flagged, total, 100*rate)
	}
}
