package runner

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// samples builds samples every sampleEvery for dur, the rate at each
// moment given by rate(t).
func samples(dur time.Duration, rate func(t time.Duration) float64) []sample {
	var out []sample
	var n float64
	for at := time.Duration(0); at <= dur; at += sampleEvery {
		out = append(out, sample{at: at, effects: int64(n)})
		n += rate(at) * sampleEvery.Seconds()
	}
	return out
}

func TestSettledWaitsForTheRamp(t *testing.T) {
	// A rate that climbs for 10 s, then holds at 50,000/s.
	ramp := func(t time.Duration) float64 {
		if t < 10*time.Second {
			return 5000 + 4500*t.Seconds()
		}
		return 50000
	}
	var at time.Duration
	ss := samples(30*time.Second, ramp)
	for i := range ss {
		if settled(ss[:i+1], 3*time.Second, 0) {
			at = ss[i].at
			break
		}
	}
	if at < 10*time.Second || at > 15*time.Second {
		t.Fatalf("settled at %s, want between the end of the ramp (10s) and 15s", at)
	}
	flat := samples(10*time.Second, func(time.Duration) float64 { return 1000 })
	if settled(flat[:len(flat)/3], 5*time.Second, 0) {
		t.Error("settled before the minimum warm-up")
	}
	if !settled(flat, 5*time.Second, 0) {
		t.Error("a flat rate after the minimum warm-up did not settle")
	}
	// At a fixed rate, catching up after a slow start is not settled.
	if settled(flat, 5*time.Second, 1500) {
		t.Error("1,000/s against a rate of 1,500/s settled")
	}
	if !settled(flat, 5*time.Second, 1020) {
		t.Error("1,000/s against a rate of 1,020/s did not settle")
	}
}

func TestJudgeWindow(t *testing.T) {
	flat := samples(10*time.Second, func(time.Duration) float64 { return 20000 })
	w := judgeWindow(flat, 10*time.Second, 0)
	if !w.Steady || w.Events != 200000 || w.MeasuredS != 10 || w.RateCV > 0.01 {
		t.Fatalf("flat window: %+v", w)
	}
	rising := samples(10*time.Second, func(t time.Duration) float64 { return 20000 + 3000*t.Seconds() })
	if w := judgeWindow(rising, 10*time.Second, 0); w.Steady || !strings.Contains(w.Why, "trends") || w.Trend < 0.5 {
		t.Errorf("rising window: %+v, want not steady, trending", w)
	}
	if w := judgeWindow(flat[:20], 10*time.Second, 0); w.Steady || !strings.Contains(w.Why, "shorter") {
		t.Errorf("short window: %+v, want not steady, shorter than asked", w)
	}
	sparse := samples(10*time.Second, func(time.Duration) float64 { return 50 })
	if w := judgeWindow(sparse, 10*time.Second, 0); w.Steady || !strings.Contains(w.Why, "too few") {
		t.Errorf("sparse window: %+v, want not steady, too few events", w)
	}
	if w := judgeWindow(flat, 10*time.Second, 25000); w.Steady || !strings.Contains(w.Why, "falls behind") {
		t.Errorf("20,000/s at a rate of 25,000/s: %+v, want falls behind", w)
	}
	if w := judgeWindow(flat[:1], 10*time.Second, 0); w.Steady {
		t.Errorf("no window: %+v", w)
	}
}

// TestNoisyFlatWindowIsSteady: a window whose per-second rate scatters
// (a busy machine) but does not move is steady; the same scatter on a
// climb is not.
func TestNoisyFlatWindowIsSteady(t *testing.T) {
	wobble := []float64{1.25, 0.8, 1.1, 0.75, 1.3, 0.85, 1.2, 0.7, 1.15, 0.9, 1.0}
	noisy := func(base, climb float64) []sample {
		return samples(10*time.Second, func(at time.Duration) float64 {
			return (base + climb*at.Seconds()) * wobble[int(at.Seconds())%len(wobble)]
		})
	}
	if w := judgeWindow(noisy(20000, 0), 10*time.Second, 0); !w.Steady {
		t.Errorf("noisy flat window: %+v, want steady", w)
	}
	if w := judgeWindow(noisy(10000, 2500), 10*time.Second, 0); w.Steady {
		t.Errorf("noisy window climbing 2.5x: %+v, want not steady", w)
	}
}

// TestOneHighSecondIsNoTrend: per-second rates of a RabbitMQ round of
// make bench (a 2-core host, scatter 17%): flat but for two high seconds
// late in the window. Its least-squares line rises 35% with t 2.8, which
// the earlier fixed t > 2.5 called a trend; that it rose more than 10%
// has p 0.04, no evidence at the level a run of 20 windows needs. A
// climb that is really there (each second higher than the one before,
// 3% scatter on top) still is one.
func TestOneHighSecondIsNoTrend(t *testing.T) {
	per := []float64{8909, 9543, 10787, 12154, 9958, 10400, 10707, 10784, 15439, 12725, 12725}
	w := judgeWindow(samples(10*time.Second, func(at time.Duration) float64 { return per[int(at.Seconds())] }), 10*time.Second, 0)
	if !w.Steady || w.Trend < 0.3 || *w.TrendP < 0.02 || *w.TrendP > 0.06 {
		t.Fatalf("flat window with two high seconds: %+v, want steady, a trend over 30%% with p between 0.02 and 0.06", w)
	}
	climb := samples(10*time.Second, func(at time.Duration) float64 {
		i := int(at.Seconds())
		return (9000 + 400*float64(i)) * (1 + 0.03*float64(i%3-1))
	})
	if w := judgeWindow(climb, 10*time.Second, 0); w.Steady || *w.TrendP >= trendAlpha || !strings.Contains(w.Why, "trends") {
		t.Errorf("a 40%% climb with 3%% scatter: %+v, want not steady, trending", w)
	}
}

// TestStallIsNotSteady: a window that fell to a tenth of its rate for a
// few seconds and came back (a round of an A/A run: 50k → 4k → 40k
// events/s) has little slope, but is not steady.
func TestStallIsNotSteady(t *testing.T) {
	per := []float64{50, 49, 52, 51, 41, 36, 26, 8, 6, 4, 25, 40, 45, 50}
	v := samples(13*time.Second, func(at time.Duration) float64 { return 1000 * per[int(at.Seconds())] })
	w := judgeWindow(v, 13*time.Second, 0)
	if w.Steady || !strings.Contains(w.Why, "stalled") {
		t.Fatalf("stalled window: %+v, want not steady, stalled", w)
	}
	if !strings.Contains(w.Why, "in second 8") {
		t.Errorf("the stall is named at second %q, want the first second below a quarter of the median (8)", w.Why)
	}
}

// TestSteadyResultHoldsNoClock: the window a cell reports is a copy, so
// the run's results never keep a finished cell's clock (and through it
// its tally, consumers, publisher and stream) alive.
func TestSteadyResultHoldsNoClock(t *testing.T) {
	k := &steadyClock{}
	k.window.MeasuredS = 10
	w := k.result()
	if w == &k.window || w.MeasuredS != 10 {
		t.Fatalf("result() = %p (MeasuredS %v), the clock's window is at %p: want a copy", w, w.MeasuredS, &k.window)
	}
}

// TestShuffledWindowsRarelyTrend: the per-second effect rates of the 20
// windows of one make bench (5 rounds of 4 cells, a 2-core host,
// scatter 6-26%), each shuffled many times so that nothing in it
// trends, are called trending in under 0.5% of windows, so that a run
// of 20 windows marks a steady cell not steady in few runs. The earlier
// rule (a change over 10% whose slope had t > 2.5) called over 2%
// trending: one cell or more in about every other make bench.
func TestShuffledWindowsRarelyTrend(t *testing.T) {
	b, err := os.ReadFile("../results/testdata/make-bench-windows.json")
	if err != nil {
		t.Fatal(err)
	}
	var windows []struct {
		Cell  string
		Round int
		Rates []float64
	}
	if err := json.Unmarshal(b, &windows); err != nil {
		t.Fatal(err)
	}
	judge := func(per []float64) results.Window {
		return judgeWindow(samples(10*time.Second, func(at time.Duration) float64 {
			return per[min(int(at.Seconds()), len(per)-1)]
		}), 10*time.Second, 0)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const shuffles = 300
	var now, before, n int
	for _, w := range windows {
		if j := judge(w.Rates); !j.Steady {
			t.Errorf("%s round %d as measured: %s", w.Cell, w.Round, j.Why)
		}
		per := slices.Clone(w.Rates)
		for range shuffles {
			rng.Shuffle(len(per), func(i, j int) { per[i], per[j] = per[j], per[i] })
			n++
			if strings.Contains(judge(per).Why, "trends") {
				now++
			}
			if trend, se, _ := results.CommonTrend([][]float64{per}); math.Abs(trend) > steadyTrend && (se == 0 || math.Abs(trend/se) > 2.5) {
				before++
			}
		}
	}
	t.Logf("shuffled windows called trending: %d of %d (%.2f%%); by the earlier rule %d (%.2f%%)", now, n, 100*float64(now)/float64(n), before, 100*float64(before)/float64(n))
	if float64(now) > 0.005*float64(n) {
		t.Errorf("%d of %d shuffled windows called trending, want under 0.5%%", now, n)
	}
	if float64(before) < 0.02*float64(n) {
		t.Errorf("the earlier rule called %d of %d trending: the data no longer shows why it was replaced", before, n)
	}
}
