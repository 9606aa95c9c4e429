package render

import (
	"fmt"

	"github.com/inboxbench/inboxbench/results"
)

// ExternalNote says what the external table shows.
const ExternalNote = "Cells whose strategy calls the external service: its delay per call, and its call log counted apart from the database's effects (paid: requests applied, one per event that took effect when the strategy is right), with the calls' own latency and the effect's end to end (intended publish → the service answered; for an outbox, after its relay)."

// ExternalHeader and ExternalRows are the external-service table every
// writer shows.
var ExternalHeader = []string{"cell", "delay", "calls", "paid", "replayed", "queries", "refused", "timed out", "call p50", "call p99", "external e2e p99"}

// ExternalRows returns one row per cell of run whose strategy calls the
// external service.
func ExternalRows(run *results.Run) [][]string {
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		x := c.External
		if x == nil {
			continue
		}
		n := func(v int64) string { return results.Thousands(v) }
		rows = append(rows, []string{c.Name(), fmt.Sprintf("%gms", x.DelayMs), n(x.Calls), n(x.Effects), n(x.Replays), n(x.Queries), n(x.Refused), n(x.TimedOut),
			dashMicros(c.Latency.ExternalCall.P50), dashMicros(c.Latency.ExternalCall.P99), dashMicros(c.Latency.ExternalE2E.P99)})
	}
	return rows
}

// external writes the external-service table.
func (m *mdWriter) external(run *results.Run) {
	if rows := ExternalRows(run); m.section("External service", ExternalNote, rows) {
		m.table(ExternalHeader, "lrrrrrrrrrr", rows)
	}
}
