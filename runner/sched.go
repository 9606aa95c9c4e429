package runner

import (
	"math"
	"runtime/metrics"

	"github.com/inboxbench/inboxbench/results"
)

// The Go runtime's histogram of how long goroutines waited, runnable,
// before they ran: on a host whose cores are shared with the brokers and
// PostgreSQL, the harness's own goroutines (the publisher waking at its
// next message's intended time among them) wait for a CPU, and that wait
// is in every latency the harness measures from an intended time.
const schedMetric = "/sched/latencies:seconds"

// schedReading is the histogram's counts at a moment.
type schedReading struct {
	counts  []uint64
	buckets []float64
}

func readSched() schedReading {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedReading{}
	}
	h := s[0].Value.Float64Histogram()
	return schedReading{counts: append([]uint64(nil), h.Counts...), buckets: h.Buckets}
}

// since summarises the waits between before and r, in microseconds; a
// percentile is its bucket's upper bound (the lower for the last,
// unbounded bucket).
func (r schedReading) since(before schedReading) results.Summary {
	if len(r.counts) == 0 || len(before.counts) != len(r.counts) {
		return results.Summary{}
	}
	d := make([]uint64, len(r.counts))
	var n uint64
	for i := range d {
		d[i] = r.counts[i] - before.counts[i]
		n += d[i]
	}
	if n == 0 {
		return results.Summary{}
	}
	at := func(q float64) int64 {
		want := uint64(math.Ceil(q * float64(n)))
		var c uint64
		for i, k := range d {
			c += k
			if c >= want {
				edge := r.buckets[i+1]
				if math.IsInf(edge, 1) {
					edge = r.buckets[i]
				}
				return int64(edge * 1e6)
			}
		}
		return 0
	}
	return results.Summary{Count: int64(n), P50: at(0.5), P90: at(0.9), P99: at(0.99), P999: at(0.999), Max: at(1)}
}
