package render

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/inboxbench/inboxbench/results"
)

// Formatting shared by the writers of this package (results/format.go has
// the figures' own formats, shared with the progress lines).

// latencyCell formats one latency figure for a table; a histogram that
// recorded nothing prints as a dash rather than a misleading "0µs".
func latencyCell(s results.Summary, us int64) string {
	if s.Count == 0 {
		return "—"
	}
	return results.FormatMicros(us)
}

// formatSeconds renders a duration in seconds: "42.1s", "3m12s".
func formatSeconds(s float64) string {
	if s < 120 {
		return strconv.FormatFloat(s, 'f', 1, 64) + "s"
	}
	m := int(s) / 60
	return fmt.Sprintf("%dm%02ds", m, int(s)-m*60)
}

// sortedKeys returns a map's keys in order, for deterministic output.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
