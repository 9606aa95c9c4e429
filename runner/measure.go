package runner

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/inboxbench/inboxbench/results"
)

// Latencies are recorded in microseconds from 1µs to 5 minutes with three
// significant digits.
const (
	histMin    = 1
	histMax    = int64(5 * time.Minute / time.Microsecond)
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

func micros(d time.Duration) int64 {
	us := d.Microseconds()
	if us < histMin {
		return histMin
	}
	if us > histMax {
		return histMax
	}
	return us
}

// meter is one writer's histograms: each shard's deliveries are handled one
// at a time, so a meter per shard has a single writer and its mutex is
// uncontended except when progress reads it once a second. No global lock
// sits on the hot path.
type meter struct {
	mu     sync.Mutex
	e2e    *hdrhistogram.Histogram
	apply  *hdrhistogram.Histogram
	dedup  *hdrhistogram.Histogram
	byKind map[string]*hdrhistogram.Histogram
	// recent is e2e since it was last taken: by the progress line in a
	// streamed cell, by the rate step in a rate search (never both: the
	// search runs neither the progress line nor workers); stepDedup is a
	// rate step's dedup latency.
	recent, stepDedup *hdrhistogram.Histogram
	// sec is e2e since the timeline took it last (timeline.go), recorded
	// only in a cell whose timeline keeps latencies per second.
	sec     *hdrhistogram.Histogram
	enabled bool
	ms      *meters
}

func newMeter(enabled bool) *meter {
	return &meter{e2e: newHist(), apply: newHist(), dedup: newHist(), recent: newHist(), stepDedup: newHist(),
		byKind: map[string]*hdrhistogram.Histogram{}, enabled: enabled}
}

// recordSecond adds an e2e latency to the second's histogram when the
// cell's timeline keeps them (under m.mu).
func (m *meter) recordSecond(us int64) {
	if m.ms == nil || !m.ms.perSecond.Load() {
		return
	}
	if m.sec == nil {
		m.sec = newHist()
	}
	m.sec.RecordValue(us)
}

// record records one decision of kind: its apply time, its dedup
// latency (zero: not a duplicate) and its end-to-end latency (zero: not
// measured, sent or decided during the warm-up).
func (m *meter) record(kind string, e2e, apply, dedup time.Duration) {
	if !m.enabled {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.apply.RecordValue(micros(apply))
	h := m.byKind[kind]
	if h == nil {
		h = newHist()
		m.byKind[kind] = h
	}
	h.RecordValue(micros(apply))
	if dedup > 0 {
		m.dedup.RecordValue(micros(dedup))
		m.stepDedup.RecordValue(micros(dedup))
	}
	if e2e > 0 {
		m.e2e.RecordValue(micros(e2e))
		m.recent.RecordValue(micros(e2e))
		m.recordSecond(micros(e2e))
	}
}

// recordE2E records an end-to-end latency alone: a cell observed from
// outside sees when each event committed, not how its consumer applied
// it.
func (m *meter) recordE2E(e2e time.Duration) {
	if !m.enabled || e2e <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.e2e.RecordValue(micros(e2e))
	m.recent.RecordValue(micros(e2e))
	m.recordSecond(micros(e2e))
}

// meters hands out one meter per shard and merges them.
type meters struct {
	enabled bool
	m       sync.Map // shard → *meter
	publish *hdrhistogram.Histogram
	// lag is the publish lag, merged from the cell's publisher once it
	// finished (under pubMu too).
	lag   *hdrhistogram.Histogram
	pubMu sync.Mutex
	// extCall and extE2E are the external calls' round trips and their
	// end-to-end latency (intended publish → answer), from every caller
	// of the process: the consumers and the outbox relay.
	extMu           sync.Mutex
	extCall, extE2E *hdrhistogram.Histogram
	// perSecond asks the meters for each second's e2e latencies (a cell
	// with faults: timeline.go).
	perSecond atomic.Bool
}

func newMeters(enabled bool) *meters {
	return &meters{enabled: enabled, publish: newHist(), lag: newHist(), extCall: newHist(), extE2E: newHist()}
}

// recordExternal records an answered external call that took d, made for
// an event meant to be published at intended; what was sent during the
// warm-up (before warmEnd, unix nanos) is not measured.
func (ms *meters) recordExternal(d time.Duration, intended time.Time, warmEnd int64) {
	if !ms.enabled || time.Now().UnixNano() < warmEnd {
		return
	}
	ms.extMu.Lock()
	defer ms.extMu.Unlock()
	ms.extCall.RecordValue(micros(d))
	if !intended.IsZero() {
		ms.extE2E.RecordValue(micros(time.Since(intended)))
	}
}

func (ms *meters) get(shard string) *meter {
	if v, ok := ms.m.Load(shard); ok {
		return v.(*meter)
	}
	m := newMeter(ms.enabled)
	m.ms = ms
	v, _ := ms.m.LoadOrStore(shard, m)
	return v.(*meter)
}

// recordPublish is called by each publisher goroutine once per batch.
func (ms *meters) recordPublish(d time.Duration, n int) {
	if !ms.enabled {
		return
	}
	ms.pubMu.Lock()
	ms.publish.RecordValues(micros(d), int64(n))
	ms.pubMu.Unlock()
}

// recentP99 merges and resets the per-shard "recent" histograms.
func (ms *meters) recentP99() int64 {
	all := newHist()
	ms.m.Range(func(_, v any) bool {
		m := v.(*meter)
		m.mu.Lock()
		all.Merge(m.recent)
		m.recent.Reset()
		m.mu.Unlock()
		return true
	})
	return all.ValueAtQuantile(99)
}

// takeStep merges and resets the per-shard recent and step histograms: a
// rate step's e2e and dedup latencies since the previous call.
func (ms *meters) takeStep() (e2e, dedup results.Summary) {
	a, b := newHist(), newHist()
	ms.m.Range(func(_, v any) bool {
		m := v.(*meter)
		m.mu.Lock()
		a.Merge(m.recent)
		b.Merge(m.stepDedup)
		m.recent.Reset()
		m.stepDedup.Reset()
		m.mu.Unlock()
		return true
	})
	return summary(a), summary(b)
}

func (ms *meters) latencies() results.Latencies {
	e2e, apply, dedup := newHist(), newHist(), newHist()
	by := map[string]*hdrhistogram.Histogram{}
	ms.m.Range(func(_, v any) bool {
		m := v.(*meter)
		m.mu.Lock()
		defer m.mu.Unlock()
		e2e.Merge(m.e2e)
		apply.Merge(m.apply)
		dedup.Merge(m.dedup)
		for k, h := range m.byKind {
			if by[k] == nil {
				by[k] = newHist()
			}
			by[k].Merge(h)
		}
		return true
	})
	ms.pubMu.Lock()
	pub, lag := summary(ms.publish), summary(ms.lag)
	ms.pubMu.Unlock()
	l := results.Latencies{E2E: summary(e2e), Publish: pub, PublishLag: lag, Apply: summary(apply), Dedup: summary(dedup),
		ApplyByResult: map[string]results.Summary{}, Spectrum: map[string][]results.Point{
			"e2e": spectrum(e2e), "dedup": spectrum(dedup), "apply": spectrum(apply)}}
	for k, h := range by {
		l.ApplyByResult[k] = summary(h)
	}
	ms.extMu.Lock()
	l.ExternalCall, l.ExternalE2E = summary(ms.extCall), summary(ms.extE2E)
	ms.extMu.Unlock()
	return l
}

func summary(h *hdrhistogram.Histogram) results.Summary {
	if h.TotalCount() == 0 {
		return results.Summary{}
	}
	return results.Summary{Count: h.TotalCount(), P50: h.ValueAtQuantile(50), P90: h.ValueAtQuantile(90),
		P99: h.ValueAtQuantile(99), P999: h.ValueAtQuantile(99.9), Max: h.Max()}
}

// spectrum samples the percentile curve at 0, 50, 75, 87.5 … (each step
// halves the distance to 100), as HdrHistogram's percentile plots do.
func spectrum(h *hdrhistogram.Histogram) []results.Point {
	if h.TotalCount() == 0 {
		return nil
	}
	var out []results.Point
	for k := 0; k <= 16; k++ {
		p := 100 * (1 - math.Pow(2, -float64(k)))
		out = append(out, results.Point{Percentile: p, Micros: h.ValueAtQuantile(p)})
	}
	out = append(out, results.Point{Percentile: 100, Micros: h.Max()})
	return out
}

// counters are shared atomics: one add per event, no lock.
type counters struct {
	published, deliveries, executions, effects, duplicates, redeliveries,
	gaps, parked, stale, conflicts, retries, errors, crashes, rejected, failed atomic.Int64
	publishRetries atomic.Int64
	// publishErrors counts messages whose confirm failed (each is sent
	// again: publishRetries counts the batches); the timeline shows it.
	publishErrors atomic.Int64
	// brokerDeduplicated counts publishes the broker confirmed as
	// duplicates of a stored message (brokers.ErrDeduplicated): not
	// published, never delivered.
	brokerDeduplicated atomic.Int64
}

func (c *counters) snapshot() results.Counters {
	return results.Counters{
		Published: c.published.Load(), Deliveries: c.deliveries.Load(), Executions: c.executions.Load(),
		Effects: c.effects.Load(), Duplicates: c.duplicates.Load(), Redeliveries: c.redeliveries.Load(),
		Gaps: c.gaps.Load(), Parked: c.parked.Load(), Stale: c.stale.Load(), Conflicts: c.conflicts.Load(),
		Retries: c.retries.Load(), Errors: c.errors.Load(), Crashes: c.crashes.Load(), Rejected: c.rejected.Load(), Failed: c.failed.Load(),
		PublishRetries: c.publishRetries.Load(),
	}
}

// setConsumerSide stores what the workers counted (fleetconsumers.go): every
// counter but the publisher's own.
func (c *counters) setConsumerSide(s results.Counters) {
	c.deliveries.Store(s.Deliveries)
	c.executions.Store(s.Executions)
	c.effects.Store(s.Effects)
	c.duplicates.Store(s.Duplicates)
	c.redeliveries.Store(s.Redeliveries)
	c.gaps.Store(s.Gaps)
	c.parked.Store(s.Parked)
	c.stale.Store(s.Stale)
	c.conflicts.Store(s.Conflicts)
	c.retries.Store(s.Retries)
	c.errors.Store(s.Errors)
	c.crashes.Store(s.Crashes)
	c.rejected.Store(s.Rejected)
	c.failed.Store(s.Failed)
}

// export merges this process's histograms and encodes them (HdrHistogram
// V2 compressed, base64) for the coordinator; keys are "e2e", "apply",
// "dedup", "apply:RESULT", "external_call" and "external_e2e".
func (ms *meters) export() map[string]string {
	all := map[string]*hdrhistogram.Histogram{}
	merge := func(k string, h *hdrhistogram.Histogram) {
		if h.TotalCount() == 0 {
			return
		}
		if all[k] == nil {
			all[k] = newHist()
		}
		all[k].Merge(h)
	}
	ms.m.Range(func(_, v any) bool {
		m := v.(*meter)
		m.mu.Lock()
		defer m.mu.Unlock()
		merge("e2e", m.e2e)
		merge("apply", m.apply)
		merge("dedup", m.dedup)
		for k, h := range m.byKind {
			merge("apply:"+k, h)
		}
		return true
	})
	ms.extMu.Lock()
	merge("external_call", ms.extCall)
	merge("external_e2e", ms.extE2E)
	ms.extMu.Unlock()
	out := map[string]string{}
	for k, h := range all {
		if b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
			out[k] = string(b)
		}
	}
	return out
}

// absorb adds a worker's exported histograms as one more meter.
func (ms *meters) absorb(worker string, enc map[string]string) error {
	if len(enc) == 0 {
		return nil
	}
	m := newMeter(true)
	for k, v := range enc {
		h, err := hdrhistogram.Decode([]byte(v))
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		switch {
		case k == "e2e":
			m.e2e.Merge(h)
		case k == "apply":
			m.apply.Merge(h)
		case k == "dedup":
			m.dedup.Merge(h)
		case strings.HasPrefix(k, "apply:"):
			m.byKind[strings.TrimPrefix(k, "apply:")] = h
		case k == "external_call" || k == "external_e2e":
			ms.extMu.Lock()
			if k == "external_call" {
				ms.extCall.Merge(h)
			} else {
				ms.extE2E.Merge(h)
			}
			ms.extMu.Unlock()
		}
	}
	ms.m.Store("worker "+worker, m)
	return nil
}
