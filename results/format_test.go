package results

import "testing"

func TestFormatMicros(t *testing.T) {
	for in, want := range map[int64]string{
		0: "0µs", 7: "7µs", 850: "850µs", 999: "999µs", 1000: "1ms", 1234: "1.23ms", 12345: "12.3ms",
		123456: "123ms", 999999: "1,000ms", 1500000: "1.5s", 12_300_000: "12.3s", 250_000_000: "250s", -850: "-850µs",
	} {
		if got := FormatMicros(in); got != want {
			t.Errorf("FormatMicros(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestThousandsAndRates(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := Thousands(in); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[float64]string{12.54: "12.5", 99.94: "99.9", 100: "100", 12345.6: "12,346", 0: "0.0"} {
		if got := FormatRate(in); got != want {
			t.Errorf("FormatRate(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[float64]string{0: "0%", 0.0005: "0.05%", 0.124: "12.4%", 1: "100.0%"} {
		if got := FormatShare(in); got != want {
			t.Errorf("FormatShare(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestPercentileLabelsAndSpectrum(t *testing.T) {
	for n, want := range map[int]string{0: "p0", 1: "p90", 2: "p99", 3: "p99.9", 5: "p99.999"} {
		if got := percentileLabel(n); got != want {
			t.Errorf("percentileLabel(%d) = %q, want %q", n, got, want)
		}
	}
	pts := []Point{{50, 100}, {90, 1000}, {99, 10000}, {100, 50000}}
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

// TestVsNone: a broker cell is compared with the baseline of its own
// strategy in the same run, never another strategy's.
func TestVsNone(t *testing.T) {
	r := &Run{Cells: []Cell{
		{Broker: "none", Baseline: true, Strategy: "tx", Throughput: Throughput{EventsPerS: 200}},
		{Broker: "none", Baseline: true, Strategy: "batch", Throughput: Throughput{EventsPerS: 4000}},
		{Broker: "kafka", Strategy: "tx", Throughput: Throughput{EventsPerS: 150}},
		{Broker: "kafka", Strategy: "cte", Throughput: Throughput{EventsPerS: 300}},
	}}
	for i, want := range []string{"-", "-", "75%", "-"} {
		if got := r.VsNone(&r.Cells[i]); got != want {
			t.Errorf("%s/%s: VsNone = %q, want %q", r.Cells[i].Broker, r.Cells[i].Strategy, got, want)
		}
	}
}
