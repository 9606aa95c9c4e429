package workload

import (
	"strings"
	"testing"
	"time"
)

// TestFailoverPlanParses: a fault plan with every kind reads back as
// written, with the defaults of the durations it leaves out.
func TestFailoverPlanParses(t *testing.T) {
	s, err := Parse([]byte(`events: 1000
faults:
  failover:
    - {kind: leader-kill, target: broker, at: 0.2, down: 15s}
    - {kind: leader-pause, target: postgres, at: 0.4}
    - {kind: rolling-restart, target: broker, at: 0.6}
    - {kind: leader-kill-after-lag, target: postgres, at: 0.8, pause: 5s}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := s.Faults.Failover
	if len(f) != 4 {
		t.Fatalf("%d faults, want 4: %+v", len(f), f)
	}
	want := []FailoverFault{
		{Kind: FailoverLeaderKill, Target: TargetBroker, At: 0.2, Down: Duration(15 * time.Second)},
		{Kind: FailoverLeaderPause, Target: TargetPostgres, At: 0.4},
		{Kind: FailoverRollingRestart, Target: TargetBroker, At: 0.6},
		{Kind: FailoverLeaderKillAfterLag, Target: TargetPostgres, At: 0.8, Pause: Duration(5 * time.Second)},
	}
	for i := range want {
		if f[i] != want[i] {
			t.Errorf("fault %d = %+v, want %+v", i, f[i], want[i])
		}
	}
	if d := f[0].DownOrDefault(); d != 15*time.Second {
		t.Errorf("down = %s, want the file's 15s", d)
	}
	if d := f[2].DownOrDefault(); d != DefaultFailoverDown {
		t.Errorf("down = %s, want the default %s", d, DefaultFailoverDown)
	}
	if d := f[1].PauseFor(9 * time.Second); d != 23*time.Second {
		t.Errorf("pause with a 9s detection = %s, want twice it plus 5s", d)
	}
	if d := f[3].LagOrDefault(); d != 5*time.Second {
		t.Errorf("lag = %s, want the file's 5s", d)
	}
	if !s.Faults.HitsPostgres() {
		t.Error("HitsPostgres = false with two faults on postgres")
	}
	if f[1].Name() != "leader-pause of postgres" {
		t.Errorf("Name = %q", f[1].Name())
	}
	if s2, _ := Parse([]byte("faults:\n  failover: [{kind: leader-kill, target: broker, at: 0.5}]\n")); s2.Faults.HitsPostgres() {
		t.Error("HitsPostgres = true for a plan that fails only the broker over")
	}
}

// TestFailoverPlanRejects: each mistake is named with the field and what
// is accepted.
func TestFailoverPlanRejects(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"unknown kind":   {"{kind: leader-nap, target: broker, at: 0.5}", "faults.failover[0].kind: \"leader-nap\": accepted values are leader-kill, leader-pause, rolling-restart, leader-kill-after-lag"},
		"unknown target": {"{kind: leader-kill, target: zookeeper, at: 0.5}", "faults.failover[0].target: \"zookeeper\": accepted values are broker"},
		"no target":      {"{kind: leader-kill, at: 0.5}", "faults.failover[0].target: \"\""},
		"at zero":        {"{kind: leader-kill, target: broker}", "faults.failover[0].at: 0: the share of the stream"},
		"at one":         {"{kind: leader-kill, target: broker, at: 1}", "faults.failover[0].at: 1:"},
		"at nan":         {"{kind: leader-kill, target: broker, at: .nan}", "faults.failover[0].at: NaN"},
		"out of order":   {"{kind: leader-kill, target: broker, at: 0.5}, {kind: leader-pause, target: broker, at: 0.5}", "faults.failover[1].at: 0.5: list the faults in the order they fire"},
		"down too long":  {"{kind: leader-kill, target: broker, at: 0.5, down: 11m}", "faults.failover[0]: down and pause: use 0"},
		"down on pause":  {"{kind: leader-pause, target: broker, at: 0.5, down: 5s}", "faults.failover[0].down: only a killed node stays down"},
		"pause on kill":  {"{kind: leader-kill, target: broker, at: 0.5, pause: 5s}", "faults.failover[0].pause: only leader-pause and leader-kill-after-lag"},
		"unknown field":  {"{kind: leader-kill, target: broker, at: 0.5, node: 2}", "field node not found"},
	} {
		t.Run(name, func(t *testing.T) {
			in := "faults:\n  failover: [" + tc.in + "]\n"
			_, err := Parse([]byte(in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) error = %v, want it to contain %q", in, err, tc.want)
			}
		})
	}
	_, err := Parse([]byte("measure: 10s\nfaults:\n  failover: [{kind: leader-kill, target: broker, at: 0.5}]\n"))
	if err == nil || !strings.Contains(err.Error(), "measure with failover faults") {
		t.Errorf("a failover fault in a steady-state workload: %v, want it refused", err)
	}
}
