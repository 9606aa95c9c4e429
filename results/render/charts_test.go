package render

import (
	"testing"

	"github.com/inboxbench/inboxbench/results"
)

func TestPercentileLabelsAndSpectrum(t *testing.T) {
	for n, want := range map[int]string{0: "p0", 1: "p90", 2: "p99", 3: "p99.9", 5: "p99.999"} {
		if got := percentileLabel(n); got != want {
			t.Errorf("percentileLabel(%d) = %q, want %q", n, got, want)
		}
	}
	pts := []results.Point{{Percentile: 50, Micros: 100}, {Percentile: 90, Micros: 1000}, {Percentile: 99, Micros: 10000}, {Percentile: 100, Micros: 50000}}
	for _, tc := range []struct {
		q, want float64
	}{
		{0, 2},                   // below the first point: hold it
		{50, 2},                  // on a point
		{90, 3},                  // on a point
		{96.83772233983162, 3.5}, // half way between p90 and p99 in nines
		{99.5, 4.69897},          // beyond the last finite point: the max
	} {
		if got := valueAt(pts, tc.q); got < tc.want-1e-4 || got > tc.want+1e-4 {
			t.Errorf("valueAt(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}
