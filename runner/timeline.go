package runner

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/inboxbench/inboxbench/results"
)

// A cell's timeline: its counters sampled once a second from the start of
// the stream (effects per second always, for Throughput.Series; the
// publisher's and the consumers' counts and each second's end-to-end
// latencies in a cell that injects faults), and the faults' records. The
// outage of each fault is computed from it after the stream
// (results.ComputeOutage), and its e2e p99.9 from the seconds around it.

// timeline is what the sampler recorded.
type timeline struct {
	effects []float64
	counts  results.Timeline
	// e2e holds each second's end-to-end latencies (nil seconds had
	// none); only kept when asked.
	e2e []*hdrhistogram.Histogram
}

// secondDigits is the precision of the per-second latency histograms:
// two significant digits keep a second's histogram near 24 KiB, so an
// hour of a faulted cell stays under 100 MiB.
const secondDigits = 2

// sampleTimeline samples t once a second until ctx ends, then delivers
// what it recorded; with detail it keeps every counter of the timeline
// and each second's e2e latencies (which the meters then record per
// second).
func sampleTimeline(ctx context.Context, t *tally, detail bool) <-chan *timeline {
	out := make(chan *timeline, 1)
	if detail {
		t.meters.perSecond.Store(true)
	}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		tl := &timeline{}
		var prev [6]int64
		for {
			select {
			case <-ctx.Done():
				out <- tl
				return
			case <-tick.C:
			}
			now := [6]int64{t.c.effects.Load(), t.c.published.Load(), t.c.publishErrors.Load(),
				t.c.publishRetries.Load(), t.c.redeliveries.Load(), t.c.duplicates.Load()}
			d := func(i int) int64 { return now[i] - prev[i] }
			tl.effects = append(tl.effects, float64(d(0)))
			if detail {
				c := &tl.counts
				c.Effects = append(c.Effects, d(0))
				c.Published = append(c.Published, d(1))
				c.PublishErrors = append(c.PublishErrors, d(2))
				c.PublishRetries = append(c.PublishRetries, d(3))
				c.Redeliveries = append(c.Redeliveries, d(4))
				c.Duplicates = append(c.Duplicates, d(5))
				tl.e2e = append(tl.e2e, t.meters.takeSecond())
			}
			prev = now
		}
	}()
	return out
}

// sampleSeries records effects per second until ctx ends, then delivers
// the series.
func sampleSeries(ctx context.Context, t *tally) <-chan []float64 {
	out := make(chan []float64, 1)
	tl := sampleTimeline(ctx, t, false)
	go func() { out <- (<-tl).effects }()
	return out
}

// takeSecond merges and resets the meters' per-second e2e histograms: the
// latencies of the second just ended (nil when there were none).
func (ms *meters) takeSecond() *hdrhistogram.Histogram {
	var sec *hdrhistogram.Histogram
	ms.m.Range(func(_, v any) bool {
		m := v.(*meter)
		m.mu.Lock()
		if m.sec != nil && m.sec.TotalCount() > 0 {
			if sec == nil {
				sec = hdrhistogram.New(histMin, histMax, secondDigits)
			}
			sec.Merge(m.sec)
			m.sec.Reset()
		}
		m.mu.Unlock()
		return true
	})
	return sec
}

// faultLog records when each fault a cell's actions injected hit, what it
// hit, and when its action ended.
type faultLog struct {
	mu     sync.Mutex
	faults []*faultRecord
}

type faultRecord struct {
	name     string
	what     []string
	hit, end time.Time
	err      error
}

// begin opens the record of an action starting now; hit, passed to the
// action (CellInfo.Hit), marks the moment the fault hit (the first call)
// and what it did (every call). An action that never calls it hit when
// it started.
func (l *faultLog) begin(name string) (rec *faultRecord, hit func(what string)) {
	rec = &faultRecord{name: name, hit: time.Now()}
	marked := false
	l.mu.Lock()
	l.faults = append(l.faults, rec)
	l.mu.Unlock()
	return rec, func(what string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if !marked {
			rec.hit, marked = time.Now(), true
		}
		if what != "" {
			rec.what = append(rec.what, what)
		}
	}
}

func (l *faultLog) finish(rec *faultRecord, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec.end, rec.err = time.Now(), err
}

// results turns the records into the cell's faults, times from start,
// each with its outage from tl when tl has the detail.
func (l *faultLog) results(start time.Time, tl *timeline) []results.Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]results.Fault, 0, len(l.faults))
	for i, r := range l.faults {
		f := results.Fault{Name: r.name, What: r.what, AtS: r.hit.Sub(start).Seconds()}
		if !r.end.IsZero() {
			f.EndS = r.end.Sub(start).Seconds()
		}
		if r.err != nil {
			f.Error = r.err.Error()
		}
		if tl != nil && len(tl.counts.Published) > 0 {
			end := float64(len(tl.counts.Published))
			if i+1 < len(l.faults) {
				end = l.faults[i+1].hit.Sub(start).Seconds()
			}
			o := results.ComputeOutage(tl.counts, f.AtS, max(f.EndS, f.AtS), end)
			o.E2EP999 = tl.p999Around(f.AtS, 30)
			f.Outage = &o
		}
		out = append(out, f)
	}
	return out
}

// p999Around is the 99.9th percentile of the e2e latencies of the seconds
// within half seconds of atS (µs; 0 when none was recorded).
func (tl *timeline) p999Around(atS, half float64) int64 {
	all := hdrhistogram.New(histMin, histMax, secondDigits)
	from := max(0, int(math.Floor(atS-half)))
	for i := from; i < len(tl.e2e) && float64(i) < atS+half; i++ {
		if tl.e2e[i] != nil {
			all.Merge(tl.e2e[i])
		}
	}
	if all.TotalCount() == 0 {
		return 0
	}
	return all.ValueAtQuantile(99.9)
}
