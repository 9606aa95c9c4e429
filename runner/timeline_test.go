package runner

import (
	"errors"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/inboxbench/inboxbench/results"
)

// TestFaultLogResults: each recorded fault becomes a result with its times
// from the stream's start, its steps and error, and its outage over the
// seconds up to the next fault; the e2e p99.9 comes from the seconds
// within 30 s of it. Fixed times and series, no clock.
func TestFaultLogResults(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	l := &faultLog{faults: []*faultRecord{
		{name: "leader-kill of broker", what: []string{"kill -9 of kafka-2"}, hit: at(5.5), end: at(9)},
		{name: "restart postgres", hit: at(12.2), err: errors.New("no primary")},
	}}
	flat := func(v int64, n int) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = v
		}
		return s
	}
	tl := &timeline{counts: results.Timeline{Effects: flat(100, 20), Published: flat(100, 20), PublishErrors: flat(1, 20),
		PublishRetries: flat(0, 20), Redeliveries: flat(0, 20), Duplicates: flat(0, 20)}, e2e: make([]*hdrhistogram.Histogram, 20)}
	tl.counts.Published[6], tl.counts.Published[7] = 0, 0
	h := hdrhistogram.New(histMin, histMax, secondDigits)
	h.RecordValue(250_000)
	tl.e2e[7] = h
	got := l.results(start, tl)
	if len(got) != 2 {
		t.Fatalf("%d faults, want 2", len(got))
	}
	a, b := got[0], got[1]
	if a.AtS != 5.5 || a.EndS != 9 || len(a.What) != 1 || a.Outage == nil {
		t.Fatalf("first fault %+v", a)
	}
	if o := a.Outage; o.WindowToS != 12.2 || o.PublishErrors != 7 || *o.PublishOutageS != 2.5 || !o.ConsumeRecovered {
		t.Errorf("first outage %+v: want errors of seconds 5-11, publishing back at second 8", *o)
	}
	if a.Outage.E2EP999 < 240_000 || a.Outage.E2EP999 > 260_000 {
		t.Errorf("e2e p99.9 %d µs, want the 250 ms recorded in second 7", a.Outage.E2EP999)
	}
	if b.Error != "no primary" || b.EndS != 0 || b.Outage.WindowToS != 20 {
		t.Errorf("second fault %+v (outage %+v): want its error, no end, a window to the end of the timeline", b, *b.Outage)
	}
	if l.results(start, &timeline{})[0].Outage != nil {
		t.Error("a timeline without detail gave an outage")
	}
}
