package runner

import (
	"runtime"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// TestSchedSeesGoroutinesWaitForACPU: with more busy goroutines than Ps,
// a runnable goroutine waits about a time slice (the runtime preempts
// every 10 ms), and the reading between two moments says so. The runtime
// samples one scheduling in eight per goroutine, and on a loaded host
// (CI runs packages side by side) 300 ms may hold too few preemptions to
// sample one, so the goroutines spin until a wait is seen or 10 s pass.
func TestSchedSeesGoroutinesWaitForACPU(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	before := readSched()
	stop := make(chan struct{})
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	var s results.Summary
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if s = readSched().since(before); s.Count > 0 && s.Max >= 1000 {
			break
		}
	}
	close(stop)
	if s.Count == 0 || s.Max < 1000 {
		t.Fatalf("four spinning goroutines on one P for 10 s: %+v, want waits of a millisecond or more", s)
	}
	if got := before.since(before); got.Count != 0 {
		t.Errorf("no time between two readings: %+v", got)
	}
}
