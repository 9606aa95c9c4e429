package cpuset

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

func TestRestricted(t *testing.T) {
	for _, c := range []struct {
		allowed, online string
		want            bool
	}{
		{"0-1", "0-1", false},
		{"0-63", "0-1", false}, // every possible CPU allowed, two online
		{"0", "0-1", true},
		{"1", "0-1", true},
		{"0,2-3", "0-3", true},
		{"0-3,5", "0-3,5", false},
		{"garbage", "0-1", false},
	} {
		if got := restricted(c.allowed, c.online); got != c.want {
			t.Errorf("restricted(%q, %q) = %v, want %v", c.allowed, c.online, got, c.want)
		}
	}
}

// A process started under taskset on one CPU is reported as limited to it
// (where this test itself runs on every online CPU; else it skips, and
// fails under CI=true).
func TestLimitOfAPinnedProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		core.SkipUnlessCI(t, "no /proc: not Linux")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		core.SkipUnlessCI(t, "no taskset (util-linux)")
	}
	if _, online, ok := Limit(0); ok {
		core.SkipUnlessCI(t, "this test itself runs on fewer than the online CPUs "+online)
	} else if online == "0" {
		core.SkipUnlessCI(t, "one CPU online: nothing to pin apart")
	}
	cmd := exec.Command(taskset, "-c", "0", "sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// taskset sets the affinity, then execs sleep: wait for the exec.
	for i := 0; i < 200; i++ {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		if strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	allowed, online, ok := Limit(cmd.Process.Pid)
	if !ok || allowed != "0" {
		t.Fatalf("Limit(taskset -c 0) = %q of %q, limited %v; want \"0\", limited", allowed, online, ok)
	}
}
