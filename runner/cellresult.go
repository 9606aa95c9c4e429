package runner

import (
	"fmt"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// fillResult fills res with the verdict, the measurements and the notes.
// Events the cell gave up on make it ERROR, whatever the checker said of
// the rest: the error names them.
func (c *cell) fillResult(res *results.Cell, s streamed, v verdict) error {
	res.Invariants = v.inv
	fill(res, c.t, s, c.o.Spec.PublishRate)
	res.External = v.external
	res.Failures = c.t.failures()
	res.Mode, res.Rate = c.mode(), s.rate
	if s.rate != nil {
		// The headline of a rate search is its maximum sustainable rate,
		// and what limited it is what bound the cell.
		res.Throughput.EventsPerS = s.rate.MSR
		res.Throughput.Bound = s.rate.LimitedBy.Bound()
	}
	if n := c.t.c.brokerDeduplicated.Load(); n > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%s dropped %d publishes as duplicates of a message with the same id stored within its deduplication window (%s): they were confirmed and never delivered, so they are not counted as published", c.broker, n, c.b.Capabilities().BrokerDedup))
	}
	res.Notes = append(res.Notes, c.notes.all()...)
	res.Counters.Effects = v.effects
	if ferr := failureError(res.Failures); ferr != nil {
		res.Invariants.Verdict = results.VerdictError
		return ferr
	}
	return nil
}

// fill copies the measurements into the result cell.
func fill(res *results.Cell, t *tally, s streamed, rate float64) {
	rep := s.contention
	res.Counters = t.c.snapshot()
	res.Latency = t.meters.latencies()
	res.Latency.Sched = s.sched
	first, last := t.firstEffect.Load(), t.lastEffect.Load()
	switch {
	case s.window != nil:
		// A steady cell's figure is its window's, nothing before or after.
		res.Window = s.window
		if s.window.MeasuredS > 0 {
			res.Throughput.EventsPerS = float64(s.window.Events) / s.window.MeasuredS
		}
	case last > first:
		// Throughput: effects after warm-up over the time from the later
		// of the first effect and the end of warm-up to the last effect.
		from, effects := first, res.Counters.Effects
		if w := t.warmEnd.Load(); w > first {
			from, effects = w, effects-t.effectsAtWarm.Load()
		}
		if last > from {
			res.Throughput.EventsPerS = float64(effects) / time.Duration(last-from).Seconds()
		} else {
			// Everything took effect within the warm-up: report the whole
			// window rather than nothing, and say so.
			res.Throughput.EventsPerS = float64(res.Counters.Effects) / time.Duration(last-first).Seconds()
			res.Notes = append(res.Notes, "the stream finished within the warm-up: events/s covers the whole run")
		}
	}
	if last > first {
		res.DurationS = time.Duration(last - first).Seconds()
	}
	res.Throughput.Series = s.series
	if len(s.faults) > 0 {
		res.Faults, res.Timeline = s.faults, &s.timeline.counts
	}
	res.Throughput.HostCPUBusy = s.cpuBusy
	bound(res, t, s, rate)
	res.Contention = results.Contention{Samples: rep.Samples, LockWaitSamples: rep.LockWaits, LockWaitShare: rep.LockWaitShare(),
		BlockedMax: rep.BlockedMax, Deadlocks: rep.Deadlocks, Rollbacks: rep.Rollbacks, Commits: rep.Commits}
	for _, st := range rep.Top {
		res.Contention.TopStatements = append(res.Contention.TopStatements, results.Statement{Query: st.Query, Calls: st.Calls, Rows: st.Rows, MeanMs: st.MeanMs, TotalMs: st.TotalMs})
	}
	for _, p := range rep.Series {
		res.Contention.Series = append(res.Contention.Series, results.WaitPoint{AtS: p.At.Seconds(), Waiting: p.LockWaits, Blocked: p.Blocked})
	}
}

// bound says what limited the cell: did the consumers keep up with the
// publisher (the last effect soon after the last confirm) or not?
func bound(res *results.Cell, t *tally, s streamed, rate float64) {
	if s.pubEnd.IsZero() || t.lastEffect.Load() == 0 {
		return
	}
	pub := s.pubEnd.Sub(s.start)
	if pub > 0 {
		res.Throughput.PublishedPerS = float64(t.c.published.Load()) / pub.Seconds()
	}
	lag := time.Unix(0, t.lastEffect.Load()).Sub(s.pubEnd)
	switch {
	case s.window != nil && rate == 0:
		// A steady cell's publisher waits whenever the backlog bound is
		// reached: the consumers set the pace when it waited for a tenth
		// of the time or more, the broker's publish path otherwise.
		if s.roomWait > pub/10 {
			res.Throughput.Bound = results.BoundConsume
		} else {
			res.Throughput.Bound = results.BoundPublish
		}
	case s.window != nil:
		res.Throughput.Bound = results.BoundRate
		if !s.window.Steady && strings.Contains(s.window.Why, "falls behind") {
			res.Throughput.Bound = results.BoundConsume
		}
	case lag > max(time.Second, pub/10):
		res.Throughput.Bound = results.BoundConsume
	case rate > 0:
		res.Throughput.Bound = results.BoundRate
	default:
		res.Throughput.Bound = results.BoundPublish
	}
}

func fmtMicros(us int64) string {
	if us == 0 {
		return "-"
	}
	return results.FormatMicros(us)
}
