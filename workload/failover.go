package workload

import (
	"fmt"
	"strings"
	"time"
)

// Failover faults hit a node of a replicated cluster mid-stream (the
// replicated local stack, `--topology replicated`): the leader of the
// cell's partitions or queues, or PostgreSQL's primary. A workload file
// lists them under faults.failover, each firing once when its share of
// the stream has been answered:
//
//	faults:
//	  failover:
//	    - {kind: leader-kill, target: broker, at: 0.3}
//	    - {kind: leader-pause, target: postgres, at: 0.6, pause: 20s}
//
// What each kind does to a node, and how the cluster's nodes are found,
// is package failover's; the outage each one causes is measured by the
// runner (results.Fault).
type FailoverFault struct {
	// Kind is what happens: FailoverKinds lists them.
	Kind string `yaml:"kind" json:"kind"`
	// Target is the service hit: the cell's broker or PostgreSQL.
	Target string `yaml:"target" json:"target"`
	// At is the share of the stream answered (0..1, exclusive) when the
	// fault fires.
	At float64 `yaml:"at" json:"at"`
	// Down is how long a killed node stays down before it is started
	// again (leader-kill, leader-kill-after-lag; default DefaultFailoverDown):
	// the outage measured is the cluster's failover, not the node's
	// restart.
	Down Duration `yaml:"down,omitempty" json:"down,omitempty"`
	// Pause is how long leader-pause keeps the leader stopped (default:
	// twice the cluster's failure-detection timeout, plus 5 s), and how
	// long leader-kill-after-lag keeps the followers behind before the
	// leader is killed (default DefaultFailoverLag).
	Pause Duration `yaml:"pause,omitempty" json:"pause,omitempty"`
}

// Failover fault kinds.
const (
	// FailoverLeaderKill: kill -9 of the leader (or the primary), which
	// stays down for Down; the cluster (or, for PostgreSQL, the harness)
	// fails over to another node.
	FailoverLeaderKill = "leader-kill"
	// FailoverLeaderPause: SIGSTOP of the leader's whole process for
	// Pause, longer than the cluster's failure detection, then SIGCONT:
	// a zombie leader that wakes up after the others moved on.
	FailoverLeaderPause = "leader-pause"
	// FailoverRollingRestart: every node stopped and started in turn,
	// each counted back in before the next.
	FailoverRollingRestart = "rolling-restart"
	// FailoverLeaderKillAfterLag: the followers stop copying from the
	// leader for Pause (paused inside their in-sync window, or their
	// replication cut), then the leader is killed and they resume. With
	// a weak setting (Kafka acks=1, asynchronous PostgreSQL replication)
	// what the leader confirmed meanwhile is lost; with the safe one it
	// was never confirmed.
	FailoverLeaderKillAfterLag = "leader-kill-after-lag"
)

// FailoverKinds lists the failover fault kinds.
var FailoverKinds = []string{FailoverLeaderKill, FailoverLeaderPause, FailoverRollingRestart, FailoverLeaderKillAfterLag}

// Failover fault targets.
const (
	TargetBroker   = "broker"   // the stack service of the cell's broker
	TargetPostgres = "postgres" // PostgreSQL, whatever the broker
)

// Defaults and bounds of the failover faults' durations.
const (
	DefaultFailoverDown = 10 * time.Second
	DefaultFailoverLag  = 8 * time.Second
	MaxFailoverDuration = 10 * time.Minute
)

// DownOrDefault is how long a killed node stays down.
func (f FailoverFault) DownOrDefault() time.Duration {
	return f.Down.Or(DefaultFailoverDown)
}

// LagOrDefault is how long leader-kill-after-lag keeps the followers
// behind.
func (f FailoverFault) LagOrDefault() time.Duration {
	return f.Pause.Or(DefaultFailoverLag)
}

// PauseFor is how long leader-pause stops the leader: Pause, or twice the
// failure-detection timeout of the cluster plus 5 s.
func (f FailoverFault) PauseFor(detection time.Duration) time.Duration {
	return f.Pause.Or(2*detection + 5*time.Second)
}

// Name is the fault as results and notes name it: "leader-kill of broker".
func (f FailoverFault) Name() string { return f.Kind + " of " + f.Target }

// HitsPostgres reports whether the plan fails PostgreSQL over: the
// checker's audit must then survive a promotion.
func (f Faults) HitsPostgres() bool {
	for _, x := range f.Failover {
		if x.Target == TargetPostgres {
			return true
		}
	}
	return false
}

// validateFailover checks faults.failover: known kinds and targets, shares
// of the stream in increasing order (they fire one after another), the
// durations each kind takes, and no steady-state window.
func (s *Spec) validateFailover() error {
	prev := 0.0
	for i, f := range s.Faults.Failover {
		at := fmt.Sprintf("faults.failover[%d]", i)
		switch {
		case !contains(FailoverKinds, f.Kind):
			return fmt.Errorf("%s.kind: %q: accepted values are %s", at, f.Kind, strings.Join(FailoverKinds, ", "))
		case f.Target != TargetBroker && f.Target != TargetPostgres:
			return fmt.Errorf("%s.target: %q: accepted values are %s (the cell's broker) and %s", at, f.Target, TargetBroker, TargetPostgres)
		case !(f.At > 0 && f.At < 1):
			return fmt.Errorf("%s.at: %v: the share of the stream answered when it fires, above 0 and below 1", at, f.At)
		case f.At <= prev:
			return fmt.Errorf("%s.at: %v: list the faults in the order they fire, each later than the one before (%v)", at, f.At, prev)
		case f.Down < 0 || f.Down.D() > MaxFailoverDuration || f.Pause < 0 || f.Pause.D() > MaxFailoverDuration:
			return fmt.Errorf("%s: down and pause: use 0 (the default) to %s", at, MaxFailoverDuration)
		case f.Down > 0 && f.Kind != FailoverLeaderKill && f.Kind != FailoverLeaderKillAfterLag:
			return fmt.Errorf("%s.down: only a killed node stays down (%s, %s)", at, FailoverLeaderKill, FailoverLeaderKillAfterLag)
		case f.Pause > 0 && f.Kind != FailoverLeaderPause && f.Kind != FailoverLeaderKillAfterLag:
			return fmt.Errorf("%s.pause: only %s and %s pause something", at, FailoverLeaderPause, FailoverLeaderKillAfterLag)
		case s.Measure > 0:
			return fmt.Errorf("%s: measure with failover faults: a fault fires at a share of a stream's events, and a steady-state cell has no count of them; remove one", at)
		}
		prev = f.At
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
