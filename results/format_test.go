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
