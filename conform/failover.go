package conform

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/failover"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// The failover scenarios: a node of the replicated stack hit mid-stream
// while the cell's stream flows at a fixed rate, long enough before and
// after the fault to measure its outage (package failover does the
// hitting; the runner measures). The broker ones hit the cluster of the
// cell's broker, the pg-* ones PostgreSQL's primary, whatever the broker.
// Each runs on the replicated topology only (N/A with the reason
// elsewhere) and alone: a database failover or a recovering cluster
// would disturb any cell beside it. The *-weak controls run the
// leader-kill-after-lag fault under the cluster's weak setting (Kafka
// acks=1, asynchronous PostgreSQL replication) and must lose effects.
func init() {
	for _, t := range []struct{ prefix, target, leader, of string }{
		{"", workload.TargetBroker, "the leader", "of the cell's partitions or queues (the node leading most of them)"},
		{"pg-", workload.TargetPostgres, "the primary", "of PostgreSQL"},
	} {
		for _, k := range []struct {
			name, kind, proves string
			weak               bool
		}{
			{"leader-kill", workload.FailoverLeaderKill, "kill -9 of %[1]s %[2]s mid-stream; it stays down 10 s, then rejoins: the cluster fails over, nothing confirmed is lost, redeliveries are deduplicated", false},
			{"leader-pause", workload.FailoverLeaderPause, "SIGSTOP of %[1]s %[2]s for longer than the failure detection, then SIGCONT (a zombie leader): nothing lost or doubled", false},
			{"rolling-restart", workload.FailoverRollingRestart, "every node %[2]s stopped cleanly and started again in turn, %[1]s last, each counted back in before the next: nothing lost or doubled", false},
			{"leader-kill-after-lag", workload.FailoverLeaderKillAfterLag, "the followers of %[1]s %[2]s stop copying from it for 8 s (paused inside their in-sync window, or their replication cut), then it is killed and they resume: with the safe setting nothing it confirmed is lost", false},
			{"leader-kill-weak", workload.FailoverLeaderKillAfterLag, "control: leader-kill-after-lag %[2]s under the cluster's weak setting (Kafka acks=1, asynchronous PostgreSQL replication): what %[1]s alone confirmed is lost, and the checker must say so (lost-effect)", true},
		} {
			register(failoverScenario(t.prefix+k.name, fmt.Sprintf(k.proves, t.leader, t.of), workload.FailoverFault{Kind: k.kind, Target: t.target, At: 0.3}, k.weak))
		}
	}
}

// failoverSpec is the stream of a failover scenario: 200 events/s for
// about 40 s, so that the fault (at 30%) has 12 s of steady rate before
// it and the rest of the stream to recover in.
const failoverSpec = `
seed: 13
aggregates: 32
events: 8000
publish_rate: 200
message_size: 128
consumers: 2
shards: 4
batch_size: 50
`

func failoverScenario(name, proves string, f workload.FailoverFault, weak bool) *Scenario {
	sc := &Scenario{Name: name, Proves: proves, Timeout: 10 * time.Minute, Exclusive: true,
		Outside: "fails over the replicated stack, and a service is handed the single-node stack's endpoints",
		Where: func(e *Env, broker string) string {
			return failoverWhere(e, f.Target, broker, weak)
		},
		Run: func(ctx context.Context, c Cell) Outcome {
			return runFailover(ctx, c, f, weak)
		}}
	if weak {
		sc.MustShow = runner.LostEffect
	}
	return sc
}

// failoverWhere says why a failover scenario cannot run for broker on
// this stack ("" when it can).
func failoverWhere(e *Env, target, broker string, weak bool) string {
	s := failover.Stack{Cfg: e.Cfg, Dir: e.StackDir}
	if err := s.Check(target, broker); err != nil {
		why := strings.TrimPrefix(err.Error(), failover.ErrNotReplicated.Error()+": ")
		return strings.TrimPrefix(why, failover.ErrNotRunHere.Error()+": ")
	}
	if weak {
		_, cl, _ := s.Cluster(failover.Service(target, broker))
		if _, ok := cl.(compose.Weakener); !ok {
			return fmt.Sprintf("%s has no weak setting under which a failover loses confirmed writes", cl.Name())
		}
	}
	return ""
}

// runFailover runs the scenario's stream with its fault, under the
// cluster's weak setting for a control.
func runFailover(ctx context.Context, c Cell, f workload.FailoverFault, weak bool) Outcome {
	e, name, broker := c.Env, c.Scenario, c.Broker
	s := failover.Stack{Cfg: e.Cfg, Dir: e.StackDir}
	cfg, control := e.Cfg, ""
	if weak {
		var restore func(context.Context) error
		var err error
		cfg, control, restore, err = s.Weak(ctx, failover.Service(f.Target, broker))
		if restore != nil {
			defer func() { _ = restore(context.WithoutCancel(ctx)) }()
		}
		if err != nil {
			return fail(err)
		}
	}
	spec, err := workload.Parse([]byte(failoverSpec + "name: " + name + "\n"))
	if err != nil {
		return fail(fmt.Errorf("scenario %s: workload: %w", name, err))
	}
	spec.Faults.Failover = []workload.FailoverFault{f}
	if err := spec.Validate(); err != nil {
		return fail(fmt.Errorf("scenario %s: workload: %w", name, err))
	}
	out := runStream(ctx, c, "", func(o *runner.Options, e *Env) {
		o.Spec, o.Cfg = spec, cfg
		o.Stream.Failover = s.Injector()
		o.Measure.Latency = true // the faults' e2e p99.9
		// Redeliveries and catching up after the outage must not stall
		// the cell; lost messages (the weak controls) end it after this.
		o.Limits.Stall = 30 * time.Second
		if f.Target == workload.TargetPostgres {
			// The statement trigger's log survives the promotion only in
			// a logged table.
			o.Measure.AuditMode = inbox.AuditLogged
		}
	})
	out.Control = control
	if out.Err == nil && len(out.Faults) == 0 {
		return fail(errors.New("the fault never fired: the scenario proved nothing"))
	}
	for _, x := range out.Faults {
		if x.Error != "" {
			return fail(fmt.Errorf("%s: %s", x.Name, x.Error))
		}
	}
	return out
}
