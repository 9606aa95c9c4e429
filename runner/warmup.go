package runner

import (
	"fmt"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// The warm-up rounds run before the measured ones and are not kept. A
// fixed count of them (WarmupFor negative or zero) runs every cell that
// many times. Otherwise a cell runs warm-up rounds while its rate still
// rises: after each, it warms up again when its rate was more than
// results.WarmupRise above its warm-up round before (or it has run fewer
// than minWarmupRounds), unless another round, as long as its last one,
// would end past WarmupFor since the warm-up began. Every broker is
// judged by the same rule on what its cells measure; a cell done warming
// leaves the warm-up rounds, so the rounds shrink to the cells still
// getting faster.

// minWarmupRounds: a rate seen once cannot tell whether it still rises.
const minWarmupRounds = 2

// warmup is the run's warm-up rounds, cell by cell.
type warmup struct {
	min   int           // the fewest warm-up rounds of a cell
	limit time.Duration // 0: a fixed count of min rounds
	start time.Time
	cells map[cellKey]*results.Warmup
	order []cellKey
	took  map[cellKey]time.Duration // how long each cell's last warm-up round took
	// ended, when set, is told of each cell whose warm-up ended.
	ended func(*results.Warmup)
}

// newWarmup prepares the warm-up of cells as o asks: none without
// warm-up rounds.
func newWarmup(o *Options, cells []cellKey) *warmup {
	if o.WarmupRounds <= 0 {
		return nil
	}
	wu := &warmup{min: o.WarmupRounds, start: time.Now(), cells: map[cellKey]*results.Warmup{}, order: cells, took: map[cellKey]time.Duration{}}
	if o.WarmupFor > 0 {
		wu.min, wu.limit = max(o.WarmupRounds, minWarmupRounds), o.WarmupFor
	}
	for _, k := range cells {
		wu.cells[k] = &results.Warmup{Broker: k.broker, Strategy: k.strategy}
	}
	return wu
}

// runs says whether cell k runs another warm-up round now; a cell that
// does not has its warm-up ended (when the time is up, as such).
func (wu *warmup) runs(k cellKey) bool {
	w := wu.cells[k]
	if w.Ended != "" {
		return false
	}
	if wu.limit > 0 && w.Rounds > 0 && time.Since(wu.start)+wu.took[k] > wu.limit {
		wu.end(w, results.WarmupTime)
		return false
	}
	return true
}

// end ends w's warm-up for why.
func (wu *warmup) end(w *results.Warmup, why results.WarmupEnd) {
	w.Ended = why
	if wu.ended != nil {
		wu.ended(w)
	}
}

// record takes cell k's warm-up round c, which took took, and decides
// whether the cell warms up again.
func (wu *warmup) record(k cellKey, c results.Cell, took time.Duration) {
	w := wu.cells[k]
	wu.took[k] = took
	w.Rounds++
	w.Rates = append(w.Rates, c.Throughput.EventsPerS)
	w.Seconds = time.Since(wu.start).Round(100 * time.Millisecond).Seconds()
	if why := warmupEnd(w.Rates, c.Invariants.Verdict, wu.min, wu.limit > 0); why != "" {
		wu.end(w, why)
	}
}

// warmupEnd is why a cell's warm-up ends after rates, the last round's
// verdict being verdict: "" while it goes on. adaptive is false for a
// fixed count of min rounds.
func warmupEnd(rates []float64, verdict results.Verdict, min int, adaptive bool) results.WarmupEnd {
	n := len(rates)
	switch {
	case verdict != results.VerdictPass || rates[n-1] <= 0:
		return results.WarmupFailed
	case n < min:
		return ""
	case !adaptive:
		return results.WarmupCount
	case rates[n-1] <= (1+results.WarmupRise)*rates[n-2]:
		return results.WarmupSettled
	}
	return ""
}

// done reports whether no cell warms up any longer; a cell whose time
// was up is ended here.
func (wu *warmup) done() bool {
	for _, k := range wu.order {
		if wu.runs(k) {
			return false
		}
	}
	return true
}

// result is every cell's warm-up in the cells' order (one still going on
// was stopped with the run), and the most warm-up rounds a cell ran.
func (wu *warmup) result() ([]results.Warmup, int) {
	if wu == nil {
		return nil, 0
	}
	var out []results.Warmup
	most := 0
	for _, k := range wu.order {
		w := *wu.cells[k]
		if w.Rounds == 0 {
			continue
		}
		if w.Ended == "" {
			w.Ended = results.WarmupStopped
		}
		out = append(out, w)
		most = max(most, w.Rounds)
	}
	return out, most
}

// text says what the warm-up does, for the run's first line.
func (wu *warmup) text() string {
	if wu.limit <= 0 {
		return fmt.Sprintf(" after %d of warm-up", wu.min)
	}
	return fmt.Sprintf(" after warm-up rounds (each cell at least %d, more while its rate still rises by over %.0f%% from one to the next, for at most %s)",
		wu.min, 100*results.WarmupRise, wu.limit)
}
