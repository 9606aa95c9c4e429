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
	// PublishDegradedS and ConsumeDegradedS count the whole seconds below
	// half the pre-fault rate from the second the fault hit in to the
	// later of its recovery and the end of its action: a fault of several
	// steps (a rolling restart) dips more than once.
	PublishDegradedS int `json:"publish_degraded_s"`
	ConsumeDegradedS int `json:"consume_degraded_s"`
	// WindowFromS and WindowToS are the span the counts below cover, in
	// seconds after the stream started: from the fault to the next fault,
	// or to the end of the timeline.
	WindowFromS float64 `json:"window_from_s"`
	WindowToS   float64 `json:"window_to_s"`
	// PublishErrors are messages whose confirm failed, PublishRetries the
	// batches sent again, Redeliveries deliveries the broker marked as
	// redelivered, Duplicates deliveries the inbox recognised and
	// absorbed (DUPLICATE): each counted over the window, whatever caused
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

// Timeline is a cell's per-second series: second i covers [i, i+1)
// seconds after the stream started. Kept for cells that injected faults
// (Effects is the cell's Throughput.Series again, so that a conformance
// row, which has no throughput, can draw its faults too).
type Timeline struct {
	Effects        []int64 `json:"effects"`         // events that took effect (consumed)
	Published      []int64 `json:"published"`       // confirmed by the broker
	PublishErrors  []int64 `json:"publish_errors"`  // messages whose confirm failed
	PublishRetries []int64 `json:"publish_retries"` // batches sent again
	Redeliveries   []int64 `json:"redeliveries"`
	Duplicates     []int64 `json:"duplicates"` // absorbed by the inbox
}

// PreSeconds is how many whole seconds before a fault its pre-fault rates
// average.
const PreSeconds = 10

// ComputeOutage measures the outage of a fault that hit at atS seconds
// after the stream started and whose action ended at actionEndS, with its
// counting window ending at endS (the next fault, or the end of the
// series), from the timeline's per-second series: published and consumed
// (events taking effect) per second, and its counts. Pure: the same
// series give the same figures. The e2e percentile needs the latencies
// themselves and is the caller's.
func ComputeOutage(tl Timeline, atS, actionEndS, endS float64) Outage {
	published, consumed := floatSeries(tl.Published), floatSeries(tl.Effects)
	o := Outage{WindowFromS: atS, WindowToS: endS}
	o.PrePublishPerS = preRate(published, atS)
	o.PreConsumePerS = preRate(consumed, atS)
	o.PublishOutageS, o.PublishRecovered = recovery(published, o.PrePublishPerS, atS)
	o.ConsumeOutageS, o.ConsumeRecovered = recovery(consumed, o.PreConsumePerS, atS)
	span := faultSpan{atS: atS, actionEndS: actionEndS, endS: endS}
	o.PublishDegradedS = span.degraded(published, o.PrePublishPerS, o.PublishOutageS)
	o.ConsumeDegradedS = span.degraded(consumed, o.PreConsumePerS, o.ConsumeOutageS)
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
// (nil, false) when no such second follows before the series' last
// active second; a stream with no rate before the fault, or none after
// it (publishing had ended), has nothing to lose (0, true).
func recovery(series []float64, pre, atS float64) (*float64, bool) {
	zero := 0.0
	if pre <= 0 || active(series) <= int(math.Ceil(atS)) {
		return &zero, true
	}
	for i := int(math.Ceil(atS)); i < active(series); i++ {
		if series[i] >= pre/2 {
			d := float64(i) - atS
			return &d, true
		}
	}
	return nil, false
}

// faultSpan is when a fault hit, when its action ended and where its
// counting window ends, in seconds after the stream started.
type faultSpan struct{ atS, actionEndS, endS float64 }

// degraded counts the seconds below half of pre from the one the fault
// hit in to the later of the recovery (after outage) and the action's
// end, within the window and the series' active span (after publishing
// ended, nothing is published, and that is no outage).
func (f faultSpan) degraded(series []float64, pre float64, outage *float64) int {
	atS, endS := f.atS, f.endS
	to := f.actionEndS
	if outage != nil {
		to = max(to, atS+*outage)
	} else {
		to = endS // not recovered: every second left
	}
	to = min(to, endS, float64(active(series)))
	n := 0
	for i := max(0, int(math.Floor(atS))); i < len(series) && float64(i) < to; i++ {
		if series[i] < pre/2 {
			n++
		}
	}
	return n
}

// active is the length of the series up to its last nonzero second: the
// seconds after it are the stream's end (everything published, or
// everything consumed), not an outage.
func active(series []float64) int {
	n := len(series)
	for n > 0 && series[n-1] == 0 {
		n--
	}
	return n
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

func floatSeries(s []int64) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}
