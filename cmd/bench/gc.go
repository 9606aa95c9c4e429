package main

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// tuneGC trades memory for CPU in the bench process: its garbage
// collector runs on the cores the measured database and brokers use, and
// with Go's default (GOGC=100) it took about a fifth of the harness's CPU
// in a batch baseline cell. Collecting at 5× the live heap instead, capped
// by a memory limit of half the host's memory and at most 4 GiB (the
// collector works harder as the heap nears it; a rate search holds about
// 1 GiB live), cuts that to a few percent. GOGC and GOMEMLIMIT, when set,
// win.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if total := memTotal(); total > 0 {
			debug.SetMemoryLimit(min(total/2, 4<<30))
		}
	}
}

// memTotal reads the host's memory from /proc/meminfo (0 when unknown).
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
