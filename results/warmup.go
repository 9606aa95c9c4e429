package results

import (
	"fmt"
	"strings"
	"time"
)

// A freshly started stack keeps getting faster for minutes — JVM brokers
// compiling their hot paths, caches filling — and by how long differs by
// broker and machine. So the warm-up rounds (bench run, runner/warmup.go)
// do not run a fixed count: each cell runs warm-up rounds until its rate
// no longer rises by more than WarmupRise from one to the next (two at
// least, to see that), for at most the workload's warmup_rounds_for.
// Warmup records how that went for each cell.

// WarmupRise is how much faster a cell's warm-up round may be than its
// warm-up round before and still count as no longer rising: the rounds
// of one cell on a 2-core host scatter by 10–20%, so a smaller step
// cannot be told from the scatter, and a rise that goes on in smaller
// steps shows across the measured rounds (CellStats.Rise).
const WarmupRise = 0.10

// WarmupEnd says why a cell's warm-up rounds ended.
type WarmupEnd string

// How a warm-up ended.
const (
	// WarmupSettled: its rate rose by no more than WarmupRise over its
	// warm-up round before.
	WarmupSettled WarmupEnd = "settled"
	// WarmupTime: the warm-up's time (warmup_rounds_for) was up while the
	// rate still rose.
	WarmupTime WarmupEnd = "time"
	// WarmupCount: the run asked for a fixed number of warm-up rounds.
	WarmupCount WarmupEnd = "count"
	// WarmupFailed: a warm-up round did not pass its checks (it is kept
	// among the cell's rounds, as round 0).
	WarmupFailed WarmupEnd = "failed"
	// WarmupStopped: the run was stopped during the warm-up.
	WarmupStopped WarmupEnd = "stopped"
)

// Warmup is one cell's warm-up rounds.
type Warmup struct {
	Broker   string `json:"broker"`
	Strategy string `json:"strategy"`
	// Rounds is how many warm-up rounds the cell ran, Rates their
	// events/s in order, Seconds the time from the start of the run's
	// warm-up to the end of the cell's last warm-up round.
	Rounds  int       `json:"rounds"`
	Rates   []float64 `json:"rates"`
	Seconds float64   `json:"seconds"`
	Ended   WarmupEnd `json:"ended"`
}

// LastRise is the last warm-up round's rate over the one before, minus
// one; 0 with fewer than two rates.
func (w *Warmup) LastRise() float64 {
	n := len(w.Rates)
	if n < 2 || w.Rates[n-2] <= 0 {
		return 0
	}
	return w.Rates[n-1]/w.Rates[n-2] - 1
}

// Text says how the cell warmed up: "rocketmq/batch: 4 warm-up rounds in
// 2m10s, 9,344 → 12,897 → 14,984 → 15,658 events/s, settled (+4% over
// the round before)".
func (w *Warmup) Text() string {
	rates := make([]string, len(w.Rates))
	for i, r := range w.Rates {
		rates[i] = FormatRate(r)
	}
	s := fmt.Sprintf("%s/%s: %d warm-up round(s) in %s, %s events/s, ", w.Broker, w.Strategy, w.Rounds,
		time.Duration(w.Seconds*float64(time.Second)).Round(time.Second), strings.Join(rates, " → "))
	switch w.Ended {
	case WarmupSettled:
		return s + fmt.Sprintf("settled (%+.0f%% over the round before)", 100*w.LastRise())
	case WarmupTime:
		if len(w.Rates) < 2 {
			return s + "the warm-up's time was up before a second round could tell whether it still rises"
		}
		return s + fmt.Sprintf("STILL RISING when the warm-up's time was up (%+.0f%% over the round before)", 100*w.LastRise())
	case WarmupFailed:
		return s + "ended: a warm-up round did not pass its checks"
	case WarmupStopped:
		return s + "the run was stopped during the warm-up"
	}
	if len(w.Rates) > 1 && w.LastRise() > WarmupRise {
		return s + fmt.Sprintf("a fixed number of rounds, STILL RISING (%+.0f%% over the round before)", 100*w.LastRise())
	}
	return s + "a fixed number of rounds"
}
