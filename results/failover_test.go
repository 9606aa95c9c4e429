package results

import (
	"math"
	"testing"
)

func ints(v ...int64) []int64 { return v }

func same(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestComputeOutage: fixed series with a fault at 12.5 s. The publisher
// confirms 100/s, nothing from second 13 to 16 and 40 in second 17 (below
// half), 100 again from 18; consumption stops from 13 to 19 and catches
// up in 20. Pre-fault rates average seconds 2..11 (second 0 is left out,
// and the second the fault hit in too).
func TestComputeOutage(t *testing.T) {
	pub := ints(5, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 0, 0, 0, 0, 40, 100, 100, 100, 100, 100)
	con := ints(0, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 0, 0, 0, 0, 0, 0, 0, 400, 90, 80)
	zero := make([]int64, len(pub))
	errs := append([]int64(nil), zero...)
	errs[13], errs[14], errs[22] = 7, 3, 100 // the last after the window
	retries := append([]int64(nil), zero...)
	retries[14], retries[16] = 2, 1
	redel := append([]int64(nil), zero...)
	redel[12], redel[20] = 4, 30 // 12: the second the fault hit in, counted
	dups := append([]int64(nil), zero...)
	dups[11], dups[20] = 9, 25 // 11: before the fault, not counted
	tl := Timeline{Effects: con, Published: pub, PublishErrors: errs, PublishRetries: retries, Redeliveries: redel, Duplicates: dups}

	o := ComputeOutage(tl, 12.5, 14, 22)
	if !same(o.PrePublishPerS, 100) || !same(o.PreConsumePerS, 80) {
		t.Errorf("pre-fault rates %v/s published, %v/s consumed; want 100 and 80", o.PrePublishPerS, o.PreConsumePerS)
	}
	if !o.PublishRecovered || o.PublishOutageS == nil || !same(*o.PublishOutageS, 5.5) {
		t.Errorf("publish outage %v (recovered %v), want 5.5 s: from 12.5 to second 18, the first at half the rate", o.PublishOutageS, o.PublishRecovered)
	}
	if !o.ConsumeRecovered || o.ConsumeOutageS == nil || !same(*o.ConsumeOutageS, 7.5) {
		t.Errorf("consume outage %v, want 7.5 s (second 20)", o.ConsumeOutageS)
	}
	if o.PublishErrors != 10 || o.PublishRetries != 3 || o.Redeliveries != 34 || o.Duplicates != 25 {
		t.Errorf("window counts errors %d retries %d redeliveries %d duplicates %d; want 10, 3, 34, 25",
			o.PublishErrors, o.PublishRetries, o.Redeliveries, o.Duplicates)
	}
	if o.WindowFromS != 12.5 || o.WindowToS != 22 {
		t.Errorf("window %v to %v", o.WindowFromS, o.WindowToS)
	}
	if o.PublishDegradedS != 5 || o.ConsumeDegradedS != 7 {
		t.Errorf("degraded seconds %d published, %d consumed; want 13-17 (5) and 13-19 (7)", o.PublishDegradedS, o.ConsumeDegradedS)
	}
}

// TestOutageNotRecovered: a rate that never comes back before the series'
// last active second has no outage figure, and says so; the zeros after
// it are the stream's end, not degraded seconds.
func TestOutageNotRecovered(t *testing.T) {
	pub := ints(0, 50, 50, 50, 50, 10, 0, 0)
	o := ComputeOutage(Timeline{Published: pub, Effects: ints(0, 50, 50, 50, 50, 50, 50, 50)}, 4.2, 5, 8)
	if o.PublishRecovered || o.PublishOutageS != nil {
		t.Errorf("publish outage %v recovered %v; want none, not recovered", o.PublishOutageS, o.PublishRecovered)
	}
	if !o.ConsumeRecovered || !same(*o.ConsumeOutageS, 0.8) {
		t.Errorf("consumption never slowed: outage %v, want the rest of the second it hit in (0.8 s)", *o.ConsumeOutageS)
	}
	if o.PublishDegradedS != 1 || o.ConsumeDegradedS != 0 {
		t.Errorf("degraded %d and %d seconds; want second 5 (1) and none", o.PublishDegradedS, o.ConsumeDegradedS)
	}
	// A fault after the publisher's last second costs publishing nothing.
	end := ComputeOutage(Timeline{Published: ints(0, 50, 50, 50, 0, 0), Effects: ints(0, 50, 50, 50, 50, 50)}, 4.5, 9, 6)
	if !end.PublishRecovered || *end.PublishOutageS != 0 || end.PublishDegradedS != 0 {
		t.Errorf("a fault after publishing ended: %+v", end)
	}
}

// TestOutageEarlyFault: a fault in the first seconds averages what came
// before it; a fault before anything flowed has nothing to lose.
func TestOutageEarlyFault(t *testing.T) {
	o := ComputeOutage(Timeline{Published: ints(30, 0, 40), Effects: ints(0, 0, 0)}, 1.5, 1.5, 3)
	if !same(o.PrePublishPerS, 30) {
		t.Errorf("pre-fault rate %v, want second 0's 30", o.PrePublishPerS)
	}
	if *o.PublishOutageS != 0.5 {
		t.Errorf("publish outage %v, want 0.5 (second 2 is back)", *o.PublishOutageS)
	}
	if o.PreConsumePerS != 0 || !o.ConsumeRecovered || *o.ConsumeOutageS != 0 {
		t.Errorf("nothing consumed before the fault: pre %v, outage %v", o.PreConsumePerS, *o.ConsumeOutageS)
	}
	if o := ComputeOutage(Timeline{}, 0, 0, 0); !o.PublishRecovered || *o.PublishOutageS != 0 {
		t.Errorf("empty series: %+v", o)
	}
}

// TestOutageWindowsDoNotOverlap: two faults' windows split the seconds
// between them.
func TestOutageWindowsDoNotOverlap(t *testing.T) {
	errs := ints(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	tl := Timeline{Published: make([]int64, 10), Effects: make([]int64, 10), PublishErrors: errs}
	a := ComputeOutage(tl, 2.3, 2.3, 6.7)
	b := ComputeOutage(tl, 6.7, 6.7, 10)
	if a.PublishErrors != 4 || b.PublishErrors != 4 {
		t.Errorf("errors %d and %d; want seconds 2-5 and 6-9, 4 each", a.PublishErrors, b.PublishErrors)
	}
}

// TestOutageDegradedSeconds: a fault of several steps dips twice; the
// outage ends at the first recovery, the degraded seconds count both
// dips up to the end of its action.
func TestOutageDegradedSeconds(t *testing.T) {
	pub := ints(0, 100, 100, 100, 100, 100, 0, 0, 100, 100, 10, 10, 10, 100, 100, 100)
	o := ComputeOutage(Timeline{Published: pub, Effects: pub}, 5.5, 12.2, 16)
	if *o.PublishOutageS != 2.5 || o.PublishDegradedS != 5 {
		t.Errorf("outage %v s, %d degraded seconds; want 2.5 (second 8) and 5 (6, 7, 10, 11, 12)", *o.PublishOutageS, o.PublishDegradedS)
	}
}
