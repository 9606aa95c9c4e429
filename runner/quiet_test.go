package runner

import (
	"context"
	"testing"
	"time"
)

// fakeCPU replays per-sample busy shares as /proc/stat-like counters.
func fakeCPU(shares ...float64) func() (cpuTimes, bool) {
	var t cpuTimes
	i := -1
	return func() (cpuTimes, bool) {
		if i >= 0 {
			s := shares[min(i, len(shares)-1)]
			t.total += 100
			t.busy += uint64(s * 100)
		}
		i++
		return t, true
	}
}

func TestQuietWaitsForFourCalmSamplesInARow(t *testing.T) {
	// Busy, then calm but interrupted, then calm for good.
	busy, quiet := quietWait(context.Background(), time.Minute, time.Millisecond,
		fakeCPU(0.9, 0.8, 0.1, 0.1, 0.1, 0.5, 0.1, 0.05, 0.1, 0.1, 0.9))
	if !quiet || busy >= quietBusy {
		t.Fatalf("quiet %v at %.2f busy: want quiet after the last four calm samples", quiet, busy)
	}
}

func TestQuietGivesUpOnABusyHost(t *testing.T) {
	start := time.Now()
	busy, quiet := quietWait(context.Background(), 50*time.Millisecond, time.Millisecond, fakeCPU(0.6))
	if quiet || busy < 0.5 {
		t.Fatalf("quiet %v at %.2f busy on a host always 60%% busy", quiet, busy)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("gave up after %s, asked for 50ms", el)
	}
}
