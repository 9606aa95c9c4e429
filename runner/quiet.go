package runner

import (
	"context"
	"syscall"
	"time"
)

// Before a measured cell starts, the host is let go quiet: what the cell
// before it left behind (a JVM broker's background work and collections,
// the kernel writing back a commit log's dirty pages) otherwise runs
// inside the next cell's window. Measured on `make bench` (2 cores):
// Kafka's cell ran at 39-45k events/s in the rounds where it followed
// RocketMQ's and at 45-57k where it followed RabbitMQ's, so its median
// moved by 17% between two runs with how the rounds fell.
const (
	// quietBusy is the host's CPU share (busy, or waiting for I/O) below
	// which a second counts as quiet: the idle local stack (three
	// brokers, PostgreSQL) uses a few percent.
	quietBusy = 0.2
	// quietFor is how long the host must stay below it, read in
	// quietSamples steps.
	quietFor     = time.Second
	quietSamples = 4
)

// waitQuiet flushes dirty pages to disk (sync), then waits until the
// host's CPU has been below quietBusy for quietFor, at most max (a host
// busy with something else still gets its cell run, with a note). It
// returns how long it waited and the busy share of the last second it
// saw; quiet is false when max passed first (or the host has no
// /proc/stat to read).
func waitQuiet(ctx context.Context, max time.Duration) (waited time.Duration, busy float64, quiet bool) {
	start := time.Now()
	syscall.Sync()
	busy, quiet = quietWait(ctx, max, quietFor/quietSamples, hostCPUWithIOWait)
	return time.Since(start), busy, quiet
}

// quietWait samples read every step until quietSamples samples in a row
// were below quietBusy (true), or max passed (false).
func quietWait(ctx context.Context, max, step time.Duration, read func() (cpuTimes, bool)) (busy float64, quiet bool) {
	deadline := time.Now().Add(max)
	prev, ok := read()
	if !ok {
		return 0, false
	}
	tick := time.NewTicker(step)
	defer tick.Stop()
	calm := 0
	for {
		select {
		case <-ctx.Done():
			return busy, false
		case <-tick.C:
		}
		now, ok := read()
		if !ok {
			return 0, false
		}
		busy = now.busySince(prev)
		prev = now
		if busy < quietBusy {
			calm++
		} else {
			calm = 0
		}
		if calm >= quietSamples {
			return busy, true
		}
		if !time.Now().Before(deadline) {
			return busy, false
		}
	}
}

// hostCPUWithIOWait is hostCPU counting time waiting for I/O as busy: a
// disk still writing back the last cell's pages is not quiet.
func hostCPUWithIOWait() (cpuTimes, bool) {
	t, ok := hostCPU()
	t.busy += t.iowait
	return t, ok
}
