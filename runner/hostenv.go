package runner

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/internal/cpuset"
	"github.com/inboxbench/inboxbench/results"
)

// HostEnv describes where a run is measured: this machine, this build and
// the servers (name → version as the service check read it, "postgres" for
// PostgreSQL). bench run and bench conform record it, so both files say
// which commit and which machine produced them.
func HostEnv(servers map[string]string) results.Env {
	e := results.Env{GoVersion: runtime.Version(), Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Brokers: map[string]string{}, Clients: clientVersions(), GitCommit: gitCommit(), MemoryMiB: memoryMiB()}
	for name, v := range servers {
		if name == "postgres" {
			e.Postgres = v
		} else {
			e.Brokers[name] = v
		}
	}
	e.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled"); err == nil {
		if n := autogroupNote(string(b)); n != "" {
			e.Notes = append(e.Notes, n)
		}
	}
	if allowed, online, ok := cpuset.Limit(0); ok {
		e.Notes = append(e.Notes, fmt.Sprintf("the harness ran on CPUs %s of the host's %s (its CPU affinity, e.g. taskset): cores counts those", allowed, online))
	}
	return e
}

// autogroupNote says what the kernel's autogroup setting (the contents of
// /proc/sys/kernel/sched_autogroup_enabled) means for the figures, or ""
// when it is off. When it is on, the kernel shares the CPU between
// sessions before threads, and each PostgreSQL backend is a session of its
// own, so on a host shared with the servers the harness's publisher waits
// behind them (docs/measurements.md, "Whose CPU the wait is").
func autogroupNote(setting string) string {
	if strings.TrimSpace(setting) != "1" {
		return ""
	}
	return "kernel.sched_autogroup_enabled=1: the kernel shares CPU between sessions first, and every PostgreSQL backend is a session, weighing as much as the whole bench process; on a host shared with the servers the publisher's lag and every latency include that wait (docs/measurements.md, \"Whose CPU the wait is\")"
}

// clientVersions reads the client libraries' versions from the build:
// PostgreSQL's, the histograms' and every registered driver's
// (brokers.Info).
func clientVersions() map[string]string {
	out := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	mods := []string{"github.com/jackc/pgx/v5", "github.com/HdrHistogram/hdrhistogram-go"}
	for _, b := range brokers.Names() {
		if m := brokers.InfoOf(b).Module; m != "" {
			mods = append(mods, m)
		}
	}
	for _, d := range bi.Deps {
		if slices.Contains(mods, d.Path) {
			out[d.Path] = d.Version
		}
	}
	return out
}

// gitCommit is the commit the binary was built from, or the working tree's.
func gitCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	b, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(b))
	if err := exec.Command("git", "diff", "--quiet", "HEAD").Run(); err != nil {
		c += "-dirty"
	}
	return c
}

func memoryMiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuTimes are the host's CPU counters from /proc/stat (jiffies).
// iowait is also counted apart from busy.
type cpuTimes struct{ busy, iowait, total uint64 }

// hostCPU reads the aggregate CPU line of /proc/stat; ok is false where
// there is none (not Linux).
func hostCPU() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, false
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, false
		}
		if i >= 8 { // guest time is already counted in user
			break
		}
		t.total += n
		switch i {
		case 3: // idle
		case 4:
			t.iowait += n
		default:
			t.busy += n
		}
	}
	return t, true
}

func (t cpuTimes) busySince(before cpuTimes) float64 {
	if t.total <= before.total {
		return 0
	}
	return float64(t.busy-before.busy) / float64(t.total-before.total)
}
