package runner

import (
	"testing"
	"time"
)

// BenchmarkMeasurePerEvent is what measuring adds to each handled event:
// one apply-by-result, one e2e and (for duplicates) one dedup record into
// the shard's HdrHistogram, under its uncontended mutex. Compare ns/op with
// the per-event time of the fastest cell (1/events-per-second: 20µs at
// 50k events/s) to bound the cost of measuring from below the run noise.
func BenchmarkMeasurePerEvent(b *testing.B) {
	ms := newMeters(true)
	m := ms.get("shard-0")
	e2e, apply, dedup := 3*time.Millisecond, 800*time.Microsecond, 150*time.Microsecond
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d := time.Duration(0)
		if i%10 == 0 {
			d = dedup
		}
		m.record("APPLIED", e2e+time.Duration(i%1000)*time.Microsecond, apply, d)
	}
}
