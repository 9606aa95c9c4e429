package results

import (
	"fmt"
	"math"
)

// BoundText names what set the cell's pace: the broker's publish path,
// the workload's rate, or the consumers (delivery, handler, database); for
// the database-only baseline the publisher is in-process, so "consumers"
// there means the database.
func (c *Cell) BoundText() string {
	switch c.Throughput.Bound {
	case BoundPublish:
		if c.Baseline {
			return "publisher"
		}
		return "broker publish"
	case BoundRate:
		return "workload rate"
	case BoundConsume:
		return "consumers"
	case BoundLatency:
		return "latency bound"
	}
	return "-"
}

// HostCPUText is the host's busy CPU share during the cell, or "-".
func (c *Cell) HostCPUText() string {
	if c.Throughput.HostCPUBusy == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*c.Throughput.HostCPUBusy)
}

// VsNone is a cell's throughput as a share of the database-only baseline
// (a Baseline cell, broker none) with the same strategy in the same run,
// or "-".
func (r *Run) VsNone(c *Cell) string {
	if c.Baseline {
		return "-"
	}
	if st := c.Stats; st != nil && st.VsBaseline != nil && st.VsBaseline.N > 1 {
		e := st.VsBaseline
		return fmt.Sprintf("%.0f%% [%.0f–%.0f]", 100*e.Median, 100*e.Lo, 100*e.Hi)
	}
	if c.Throughput.VsBaseline > 0 {
		return fmt.Sprintf("%.0f%%", 100*c.Throughput.VsBaseline)
	}
	for i := range r.Cells {
		b := &r.Cells[i]
		if b.Baseline && b.Strategy == c.Strategy && b.Throughput.EventsPerS > 0 {
			return fmt.Sprintf("%.0f%%", 100*c.Throughput.EventsPerS/b.Throughput.EventsPerS)
		}
	}
	return "-"
}

// RateText is events/s, with the spread of its median over the rounds
// ("81,204 ±3%") when the cell has several.
func (c *Cell) RateText() string {
	if st := c.Stats; st != nil && st.EventsPerS.N > 1 {
		return fmt.Sprintf("%s ±%.0f%%", FormatRate(c.Throughput.EventsPerS), 100*st.EventsPerS.Spread())
	}
	return FormatRate(c.Throughput.EventsPerS)
}

// SteadyText says whether a steady-state cell's window was steady: "" for
// a cell run for its events, "steady", or "NOT STEADY" with why (or in
// how many rounds). A cell whose rounds rose from one to the next is
// "NOT STEADY — still warming up", whatever its windows, and one whose
// rounds spread its median beyond ±RoundsSpreadMax "NOT STEADY — the
// rounds disagree".
func (c *Cell) SteadyText() string {
	switch {
	case c.Warming():
		r := c.Stats.Rise
		return fmt.Sprintf("NOT STEADY — still warming up: %+.0f%% over %d rounds (p %.2g)", 100*r.Rise, r.Rounds, r.P)
	case c.Stats != nil && c.Stats.NotSteady > 0:
		return fmt.Sprintf("NOT STEADY in %d of %d rounds", c.Stats.NotSteady, len(c.Rounds))
	case c.Stats != nil && c.Stats.Trend != nil && c.Stats.Trend.P < RoundsTrendAlpha:
		return fmt.Sprintf("NOT STEADY: the rounds together trend %+.0f%% over the window (p %.2g)", 100*c.Stats.Trend.Trend, c.Stats.Trend.P)
	case c.Stats != nil && c.Stats.Disagree:
		return fmt.Sprintf("NOT STEADY — rounds disagree: ±%.0f%%", 100*c.Stats.EventsPerS.Spread())
	case len(c.Rounds) > 0 && c.Rounds[0].Window != nil, c.Window != nil && c.Window.Steady:
		return "steady"
	case c.Window != nil:
		return "NOT STEADY: " + c.Window.Why
	}
	return ""
}

// Warming reports whether the cell's rate rose across its measured
// rounds beyond chance (CellStats.Rise): its median is a picture of a
// warm-up, not a figure.
func (c *Cell) Warming() bool {
	return c.Stats != nil && c.Stats.Rise != nil && c.Stats.Rise.Warming
}

// SteadyCells reports whether any cell of the run was measured at steady
// state (its window recorded), or rose across its rounds, or has rounds
// that disagree: the tables then
// have a column that says which cells are steady.
func (r *Run) SteadyCells() bool {
	for i := range r.Cells {
		if c := &r.Cells[i]; c.Window != nil || c.Warming() || c.Stats != nil && c.Stats.Disagree {
			return true
		}
	}
	return false
}

// CellNotes are the cells' notes (a client calibration cited, faults
// injected), each prefixed with its cell, for the reports.
func CellNotes(run *Run) []string {
	var out []string
	for i := range run.Cells {
		c := &run.Cells[i]
		for _, n := range c.Notes {
			out = append(out, c.Broker+"/"+c.StrategyLabel()+": "+n)
		}
	}
	return out
}

// RateAt is a rate-search cell's step at fraction f of its MSR, if measured.
func (c *Cell) RateAt(f float64) *RateStep {
	if c.Rate == nil {
		return nil
	}
	for i := range c.Rate.At {
		if math.Abs(c.Rate.At[i].Fraction-f) < 1e-9 {
			return &c.Rate.At[i]
		}
	}
	return nil
}

// Saturated reports whether any cell of run published as fast as it could.
func (r *Run) Saturated() bool {
	for i := range r.Cells {
		if r.Cells[i].Mode == ModeSaturated {
			return true
		}
	}
	return false
}
