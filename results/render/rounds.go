package render

import (
	"fmt"

	"github.com/inboxbench/inboxbench/results"
)

// RoundsHeader and RoundRows are the rounds table of a run of several
// rounds: every round of every cell, in the order it ran, so a reader sees
// how much a figure moved and whether a round stood out.
var RoundsHeader = []string{"cell", "round", "order", "events/s", "vs none", "e2e p50", "e2e p99", "publish lag p99", "warm-up", "window", "verdict"}

// RoundRows is one row per round of each cell; nil for a run of one round.
func RoundRows(run *results.Run) [][]string {
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		for j := range c.Rounds {
			r := &c.Rounds[j]
			vs := "-"
			if r.Throughput.VsBaseline > 0 {
				vs = fmt.Sprintf("%.0f%%", 100*r.Throughput.VsBaseline)
			}
			warm, window := "-", "-"
			if w := r.Window; w != nil {
				warm = fmt.Sprintf("%.1fs", w.WarmupS)
				if !w.Settled {
					warm += " (not settled)"
				}
				window = fmt.Sprintf("%.1fs steady", w.MeasuredS)
				if !w.Steady {
					window = "NOT STEADY: " + w.Why
				}
			}
			l := r.Latency
			rows = append(rows, []string{c.Name(), fmt.Sprint(r.Round), fmt.Sprint(r.Order), results.FormatRate(r.Throughput.EventsPerS), vs,
				dashMicros(l.E2E.P50), dashMicros(l.E2E.P99), dashMicros(l.PublishLag.P99), warm, window, r.VerdictText()})
		}
	}
	return rows
}

// roundsIntro says what the rounds table holds.
const roundsIntro = "Every round of every cell (order: its place in its round; over the rounds every cell runs in every place equally often). The summary's figures are these rounds' medians."
