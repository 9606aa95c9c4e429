package results

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Human-readable formatting shared by the Markdown, HTML and compare
// writers, so the same figure reads the same everywhere.

// FormatMicros renders a latency in microseconds with three significant
// digits and the largest fitting unit: "850µs", "1.23ms", "12.3ms", "1.5s".
func FormatMicros(us int64) string {
	return FormatMicrosFloat(float64(us))
}

// FormatMicrosFloat is FormatMicros of a fractional latency (a mean, a
// chart tick).
func FormatMicrosFloat(us float64) string {
	switch {
	case math.IsNaN(us) || math.IsInf(us, 0):
		return "n/a"
	case us < 0:
		return "-" + FormatMicrosFloat(-us)
	case us < 1000:
		return strconv.FormatFloat(math.Round(us), 'f', -1, 64) + "µs"
	case us < 1e6:
		return sig3(us/1e3) + "ms"
	default:
		return sig3(us/1e6) + "s"
	}
}

// sig3 prints v (≥ 1) with three significant digits, dropping trailing
// zeros ("12.3", "1.5", "123", "1,234" for large seconds).
func sig3(v float64) string {
	var s string
	switch {
	case v < 10:
		s = strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		s = strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return Thousands(int64(math.Round(v)))
	}
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Thousands renders n with comma thousands separators: 1234567 → "1,234,567".
func Thousands(n int64) string {
	if n < 0 {
		return "-" + Thousands(-n)
	}
	s := strconv.FormatInt(n, 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	head := len(s) % 3
	if head > 0 {
		b.WriteString(s[:head])
	}
	for i := head; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// FormatRate renders events per second: whole numbers with thousands
// separators from 100 up, one decimal below (a smoke run's 12.5/s matters).
func FormatRate(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	if math.Abs(v) >= 100 {
		return Thousands(int64(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// FormatShare renders a 0..1 share as a percentage; tiny non-zero shares
// keep two decimals so they don't read as zero.
func FormatShare(v float64) string {
	p := v * 100
	switch {
	case p == 0:
		return "0%"
	case math.Abs(p) < 1:
		return strconv.FormatFloat(p, 'f', 2, 64) + "%"
	default:
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
}

// FormatChange renders a relative change as a signed percentage.
func FormatChange(rel float64) string {
	if math.IsNaN(rel) {
		return "n/a"
	}
	if math.IsInf(rel, 1) {
		return "+∞"
	}
	return fmt.Sprintf("%+.1f%%", rel*100)
}

// AnomalyLine is a cell's anomalies as "name=count …", or its error.
func AnomalyLine(c Cell) string {
	if c.Error != "" {
		return "error: " + c.Error
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(c.Invariants.Anomalies)) {
		if v := c.Invariants.Anomalies[n]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", n, v))
		}
	}
	return strings.Join(parts, " ")
}

// FailureLine is one kind of failure: what, how often, the first example.
func FailureLine(f Failure) string {
	var b strings.Builder
	b.WriteString(f.Kind)
	if f.SQLState != "" {
		fmt.Fprintf(&b, " (SQLSTATE %s)", f.SQLState)
	}
	fmt.Fprintf(&b, " × %d, %d dead-lettered, first on %s: %s", f.Count, f.DeadLettered, f.Event, f.Message)
	if f.Where != "" {
		b.WriteString(", at " + f.Where)
	}
	return b.String()
}
