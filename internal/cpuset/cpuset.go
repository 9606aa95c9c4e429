// Package cpuset says on which of the host's CPUs a process may run, when
// that is not all of them: a harness and its servers pinned to separate
// CPUs (taskset, cgroups) measure something else than when they share
// every core, so the result and `bench stack status` say so.
package cpuset

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Limit reports the CPUs process pid (0: this process) may run on and the
// host's online CPUs, both in the kernel's list format ("0-3,6"), and ok
// only when the process may not run on every online CPU. Outside Linux, or
// when either file cannot be read, ok is false.
func Limit(pid int) (allowed, online string, ok bool) {
	self := "self"
	if pid != 0 {
		self = strconv.Itoa(pid)
	}
	status, err := os.ReadFile("/proc/" + self + "/status")
	if err != nil {
		return "", "", false
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, found := strings.CutPrefix(line, "Cpus_allowed_list:"); found {
			allowed = strings.TrimSpace(v)
		}
	}
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return "", "", false
	}
	online = strings.TrimSpace(string(b))
	return allowed, online, restricted(allowed, online)
}

// restricted reports whether some CPU of online is missing from allowed
// (allowed may name CPUs that are not online: the kernel lists every
// possible one).
func restricted(allowed, online string) bool {
	a, err := parse(allowed)
	if err != nil {
		return false
	}
	o, err := parse(online)
	if err != nil {
		return false
	}
	for c := range o {
		if !a[c] {
			return true
		}
	}
	return false
}

// parse reads the kernel's CPU list format: comma-separated numbers and
// inclusive ranges.
func parse(list string) (map[int]bool, error) {
	set := map[int]bool{}
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", list, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", list, err)
			}
		}
		for c := a; c <= b; c++ {
			set[c] = true
		}
	}
	return set, nil
}
