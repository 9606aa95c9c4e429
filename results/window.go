package results

// Window is how a steady-state cell was measured: it warmed up until its
// rate settled (or WarmupMax passed), then measured for the window asked.
type Window struct {
	// WarmupS is how long the warm-up lasted; Settled says it ended
	// because the rate settled rather than at the workload's warmup_max.
	WarmupS float64 `json:"warmup_s"`
	Settled bool    `json:"settled"`
	// AskedS is the window the workload asked for (measure), MeasuredS
	// the one measured, from the end of the warm-up to the end of
	// publishing; StartS is its start from the start of the cell.
	AskedS    float64 `json:"asked_s"`
	MeasuredS float64 `json:"measured_s"`
	StartS    float64 `json:"start_s"`
	// Events took effect in the window.
	Events int64 `json:"events"`
	// RateCV is the coefficient of variation of the per-second effect
	// rate over the window; Trend is the least-squares line's change over
	// the window relative to the mean rate (+0.2: it rose by a fifth).
	RateCV float64 `json:"rate_cv"`
	Trend  float64 `json:"trend"`
	// TrendP is the one-sided p-value that the trend's size exceeds the
	// 10% a steady window allows (1 when the window has fewer than three
	// seconds to fit a line through); nil in files written before it.
	TrendP *float64 `json:"trend_p,omitempty"`
	// Rates are the window's per-second effect rates, the values Trend
	// and RateCV were computed from (absent in files written before
	// them); the rounds of a cell are judged together on them too
	// (CellStats.Trend).
	Rates []float64 `json:"rates,omitempty"`
	// Steady is false when the window is shorter than asked, holds too
	// few events, or its rate still trends (or, at a fixed rate, falls
	// behind it); Why says which. Such a figure is never silently
	// averaged with steady ones: reports mark it.
	Steady bool   `json:"steady"`
	Why    string `json:"why,omitempty"`
	// QuietS is how long the cell waited before it started for the host
	// to go quiet (the cell before it done with its background work).
	QuietS float64 `json:"quiet_s,omitempty"`
	// MaxBacklog is the bound on messages sent and not yet answered by
	// the consumers that a saturated cell's window ran at: the workload's
	// max_backlog, or 2.5 s of the cell's consumption measured in its
	// warm-up; absent at a fixed rate.
	MaxBacklog int64 `json:"max_backlog,omitempty"`
}

// SteadyTrend is the largest change of a window's rate over the window,
// relative to its mean, that is still steady.
const SteadyTrend = 0.10

// RoundsTrendAlpha is the significance at which the rounds of a cell,
// judged together, show that their windows' rate changes by more than
// SteadyTrend (CellStats.Trend): the cell is then not steady even when no
// round alone showed it. Fifty seconds of five rounds see a trend that
// ten seconds' scatter hides from each round's own, stricter test; the
// level is per cell (make bench judges four).
const RoundsTrendAlpha = 0.01

// RoundsTrend is the one line fitted through the windows of a cell's
// rounds, each round at its own level.
type RoundsTrend struct {
	// Trend is the line's change over a window, relative to each round's
	// mean rate; P the one-sided p-value that its size exceeds
	// SteadyTrend; Rounds how many rounds had rates to fit.
	Trend  float64 `json:"trend"`
	P      float64 `json:"p"`
	Rounds int     `json:"rounds"`
}

// roundsTrend fits the rounds' windows together; nil without two rounds
// that recorded their rates.
func roundsTrend(rounds []Cell) *RoundsTrend {
	var ws [][]float64
	for _, r := range rounds {
		if r.Window != nil && len(r.Window.Rates) > 1 {
			ws = append(ws, r.Window.Rates)
		}
	}
	if len(ws) < 2 {
		return nil
	}
	trend, se, df := CommonTrend(ws)
	return &RoundsTrend{Trend: trend, P: ExceedsP(trend, se, SteadyTrend, df), Rounds: len(ws)}
}
