package results

import "math"

// Fault is one mid-stream fault a cell injected (a failover of a
// replicated cluster, a broker restart, killed database connections): what
// it hit, when, and what it cost the stream.
type Fault struct {
	// Name is the fault as the plan or the scenario named it
	// ("leader-kill of broker").
	Name string `json:"name"`
	// What says what it did, as the fault reported it: the node and why
	// that one ("kill -9 of kafka-2, leader of 3 of 4 partitions of the
	// cell's topic").
	What []string `json:"what,omitempty"`
	// AtS is when it hit, in seconds after the stream started (the second
	// Timeline index it falls in is floor(AtS)); EndS when the fault's
	// action finished (the node started again and counted back in).
	AtS  float64 `json:"at_s"`
	EndS float64 `json:"end_s"`
	// Error says why the fault could not be carried out.
	Error string `json:"error,omitempty"`
	// Outage is what the stream lost to it (absent when the cell kept no
	// timeline).
	Outage *Outage `json:"outage,omitempty"`
}

// Outage is what one fault cost the stream, from the cell's timeline.
type Outage struct {
	// PrePublishPerS and PreConsumePerS are the rates before the fault:
	// the mean of up to PreSeconds whole seconds before the second it hit
	// in, the stream's first second left out (it ramps up).
	PrePublishPerS float64 `json:"pre_publish_per_s"`
	PreConsumePerS float64 `json:"pre_consume_per_s"`
	// PublishOutageS is the time from the fault to the start of the first
	// whole second after it in which the broker confirmed at least half
	// the pre-fault publish rate; ConsumeOutageS the same for events
	// taking effect. Absent (null) when the rate did not come back before
	// the stream ended: PublishRecovered/ConsumeRecovered say so.
	PublishOutageS   *float64 `json:"publish_outage_s"`
	ConsumeOutageS   *float64 `json:"consume_outage_s"`
	PublishRecovered bool     `json:"publish_recovered"`
	ConsumeRecovered bool     `json:"consume_recovered"`
	// WindowS is the span the counts below cover, in seconds after the
	// stream started: from the fault to the next fault, or to the end of
	// the timeline.
	WindowS [2]float64 `json:"window_s"`
	// PublishErrors are messages whose confirm failed, PublishRetries the
	// batches sent again, Redeliveries deliveries the broker marked as
	// redelivered, Duplicates deliveries the inbox recognised and
	// absorbed (DUPLICATE): each counted over WindowS, whatever caused
	// them.
	PublishErrors  int64 `json:"publish_errors"`
	PublishRetries int64 `json:"publish_retries"`
	Redeliveries   int64 `json:"redeliveries"`
	Duplicates     int64 `json:"duplicates"`
	// E2EP999 is the end-to-end latency's 99.9th percentile (µs) of the
	// events that took effect in the minute around the fault (30 s before
	// to 30 s after); 0 when none was measured (worker processes report
	// no per-second latencies).
	E2EP999 int64 `json:"e2e_p999_us"`
}

// Timeline is a cell's per-second series beside Throughput.Series (the
// events that took effect): second i covers [i, i+1) seconds after the
// stream started. Kept for cells that injected faults.
type Timeline struct {
	Published      []int64 `json:"published"`       // confirmed by the broker
	PublishErrors  []int64 `json:"publish_errors"`  // messages whose confirm failed
	PublishRetries []int64 `json:"publish_retries"` // batches sent again
	Redeliveries   []int64 `json:"redeliveries"`
	Duplicates     []int64 `json:"duplicates"` // absorbed by the inbox
}

// PreSeconds is how many whole seconds before a fault its pre-fault rates
// average.
const PreSeconds = 10

// ComputeOutage measures the outage of a fault at atS seconds after the
// stream started, whose counting window ends at endS (the next fault, or
// the end of the series), from the per-second series: published and
// consumed (events taking effect) per second and the timeline's counts.
// Pure: the same series give the same figures. The e2e percentile needs
// the latencies themselves and is the caller's.
func ComputeOutage(tl Timeline, consumed []float64, atS, endS float64) Outage {
	published := make([]float64, len(tl.Published))
	for i, v := range tl.Published {
		published[i] = float64(v)
	}
	o := Outage{WindowS: [2]float64{atS, endS}}
	o.PrePublishPerS = preRate(published, atS)
	o.PreConsumePerS = preRate(consumed, atS)
	o.PublishOutageS, o.PublishRecovered = recovery(published, o.PrePublishPerS, atS)
	o.ConsumeOutageS, o.ConsumeRecovered = recovery(consumed, o.PreConsumePerS, atS)
	o.PublishErrors = sumWindow(tl.PublishErrors, atS, endS)
	o.PublishRetries = sumWindow(tl.PublishRetries, atS, endS)
	o.Redeliveries = sumWindow(tl.Redeliveries, atS, endS)
	o.Duplicates = sumWindow(tl.Duplicates, atS, endS)
	return o
}

// preRate is the mean of up to PreSeconds whole seconds before the one
// atS falls in, leaving out second 0; 0 when there is none.
func preRate(series []float64, atS float64) float64 {
	hit := int(math.Floor(atS))
	from := max(1, hit-PreSeconds)
	to := min(hit, len(series)) // exclusive
	if to <= from {
		// A fault in the first seconds: whatever came before it.
		from, to = 0, min(hit, len(series))
		if to <= from {
			return 0
		}
	}
	var sum float64
	for _, v := range series[from:to] {
		sum += v
	}
	return sum / float64(to-from)
}

// recovery finds the first whole second starting at or after atS whose
// rate is at least half of pre: the outage lasts from atS to its start.
// A fault that did not slow the stream still costs the rest of the second
// it hit in (the first whole second after it is back). Not recovered
// (nil, false) when no such second follows; a stream with no rate before
// the fault has nothing to lose (0, true).
func recovery(series []float64, pre, atS float64) (*float64, bool) {
	if pre <= 0 {
		zero := 0.0
		return &zero, true
	}
	for i := int(math.Ceil(atS)); i < len(series); i++ {
		if series[i] >= pre/2 {
			d := float64(i) - atS
			return &d, true
		}
	}
	return nil, false
}

// sumWindow adds the seconds from the one fromS falls in up to the one
// toS falls in (exclusive: a later fault's window starts there), at
// least the first.
func sumWindow(series []int64, fromS, toS float64) int64 {
	var n int64
	first := max(0, int(math.Floor(fromS)))
	last := max(first+1, int(math.Floor(toS)))
	for i := first; i < last && i < len(series); i++ {
		n += series[i]
	}
	return n
}
