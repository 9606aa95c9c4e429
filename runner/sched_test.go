package runner

import (
	"runtime"
	"testing"
	"time"
)

// TestSchedSeesGoroutinesWaitForACPU: with more busy goroutines than Ps,
// a runnable goroutine waits about a time slice (the runtime preempts
// every 10 ms), and the reading between two moments says so.
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
	time.Sleep(300 * time.Millisecond)
	close(stop)
	s := readSched().since(before)
	if s.Count == 0 || s.Max < 1000 {
		t.Fatalf("four spinning goroutines on one P: %+v, want waits of a millisecond or more", s)
	}
	if got := before.since(before); got.Count != 0 {
		t.Errorf("no time between two readings: %+v", got)
	}
}
