// Package failover carries out the failover faults of a workload's plan
// (workload.FailoverFault) and of the failover scenarios against the nodes
// of the local replicated stack: it finds the cluster of the service a
// fault targets (the cell's broker's, or PostgreSQL's), its leader for the
// cell's topic, and kills, pauses, restarts or detaches nodes through the
// compose.Cluster contract, with the optional interfaces beside it
// (compose.Promoter, Lagger, NodeStopper, FailureDetector, Weakener) where
// a family has them. It names no broker: any family whose service
// implements compose.Cluster can be failed over.
//
// Each fault is a runner.Action: the runner fires it at its share of the
// stream, records when it hit (runner.CellInfo.Hit) and measures the
// outage it caused.
package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// Stack is the local stack the faults hit: its configuration (the
// variant it selects) and directory.
type Stack struct {
	Cfg config.Config
	Dir string // absolute stack directory (compose.AbsDir)
}

// ErrNotReplicated marks a service that runs as one node in the selected
// stack: there is nothing to fail over to.
var ErrNotReplicated = errors.New("not replicated")

// Cluster returns the cluster that runs service in s, and the Env to
// drive it with. The error wraps ErrNotReplicated, saying what to run
// instead, when the service has no nodes to fail over.
func (s Stack) Cluster(service string) (*compose.Env, compose.Cluster, error) {
	variant, err := compose.VariantOf(s.Cfg)
	if err != nil {
		return nil, nil, err
	}
	env := &compose.Env{Dir: s.Dir, Variant: variant, Cfg: s.Cfg, Out: io.Discard}
	if service == "" {
		return nil, nil, fmt.Errorf("%w: it runs as no service of the stack", ErrNotReplicated)
	}
	svcs, err := compose.Select(variant, []string{service})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotReplicated, err)
	}
	c, ok := svcs[0].(compose.Cluster)
	if !ok {
		stack := "single-node"
		if variant != compose.VariantPlain {
			stack = variant
		}
		return nil, nil, fmt.Errorf("%w: the %s stack runs one node of %s: failover needs the replicated stack (--topology replicated)", ErrNotReplicated, stack, service)
	}
	for _, n := range c.Nodes(env) {
		if _, ours := n.Proc.PID(); ours {
			return env, c, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: no node of %s runs from the stack in %s (%s answers there, started elsewhere, or nothing does): failover hits only nodes this stack started; start them with 'bench stack up%s %s'",
		ErrNotRunHere, service, env.Path(), c.Addr(env), compose.VariantFlag(variant), service)
}

// ErrNotRunHere marks a replicated service whose nodes this stack did not
// start (another checkout's stack on the same ports, or none running):
// its processes are not this stack's to kill.
var ErrNotRunHere = errors.New("not run by this stack")

// Service is the stack service a fault on target hits in a cell of
// broker: the broker's own (brokers.Info.Service), or postgres.
func Service(target, broker string) string {
	if target == workload.TargetPostgres {
		return workload.TargetPostgres
	}
	return brokers.InfoOf(broker).Service
}

// Check says whether a fault on target can hit the stack in a cell of
// broker: nil, or an error wrapping ErrNotReplicated naming why not.
func (s Stack) Check(target, broker string) error {
	service := Service(target, broker)
	if service == "" {
		return fmt.Errorf("%w: %s runs as no service of the stack, so it has no node to fail over", ErrNotReplicated, broker)
	}
	_, _, err := s.Cluster(service)
	return err
}

// Injector makes the runner actions of a plan's failover faults against
// s (runner.Options.Stream.Failover).
func (s Stack) Injector() runner.FailoverInjector {
	return func(f workload.FailoverFault) (runner.Action, error) { return s.Action(f), nil }
}

// Action is the runner action of one failover fault: it resolves the
// cluster and the leader when it fires (leadership moves between faults).
func (s Stack) Action(f workload.FailoverFault) runner.Action {
	return runner.Action{Name: f.Name(), At: f.At, Do: func(ctx context.Context, c runner.CellInfo) error {
		env, cl, err := s.Cluster(Service(f.Target, c.Broker))
		if err != nil {
			return err
		}
		hit := c.Hit
		if hit == nil {
			hit = func(string) {}
		}
		resource := c.Topic
		if f.Target == workload.TargetPostgres {
			resource = ""
		}
		return Do(ctx, env, cl, f, resource, hit)
	}}
}

// Do carries out fault f on cl: resource is what the cell uses of it (its
// topic; "" for the whole service), hit is told when the fault hit and
// what it did.
func Do(ctx context.Context, env *compose.Env, cl compose.Cluster, f workload.FailoverFault, resource string, hit func(string)) error {
	switch f.Kind {
	case workload.FailoverLeaderKill:
		return killLeader(ctx, env, cl, resource, f.DownOrDefault(), hit)
	case workload.FailoverLeaderPause:
		return pauseLeader(ctx, env, cl, resource, f.PauseFor(failureTimeout(cl)), hit)
	case workload.FailoverRollingRestart:
		return rollingRestart(ctx, env, cl, resource, hit)
	case workload.FailoverLeaderKillAfterLag:
		return killAfterLag(ctx, env, cl, resource, f.LagOrDefault(), f.DownOrDefault(), hit)
	}
	return fmt.Errorf("failover: unknown fault kind %q", f.Kind)
}

// leader is the node leading the most of resource.
func leader(ctx context.Context, env *compose.Env, cl compose.Cluster, resource string) (compose.Node, string, error) {
	ls, err := cl.Leaders(ctx, env, resource)
	if err != nil {
		return compose.Node{}, "", fmt.Errorf("find the leader of %s: %w", what(cl, resource), err)
	}
	return ls[0], what(cl, resource), nil
}

// what names resource for notes: "topic X of kafka", "postgres".
func what(cl compose.Cluster, resource string) string {
	if resource == "" {
		return cl.Name()
	}
	return fmt.Sprintf("%s of %s", resource, cl.Name())
}

// killLeader: kill -9 of the leader, the harness's failover where the
// cluster has none of its own (after the cluster's failure-detection
// time, as a detector would notice), the node kept down for down, then
// started again and counted back in.
func killLeader(ctx context.Context, env *compose.Env, cl compose.Cluster, resource string, down time.Duration, hit func(string)) error {
	victim, of, err := leader(ctx, env, cl, resource)
	if err != nil {
		return err
	}
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	hit(fmt.Sprintf("kill -9 of %s, the leader of %s", victim.Name, of))
	if err := promote(ctx, env, cl, victim, 0, hit); err != nil {
		return err
	}
	if err := sleep(ctx, down); err != nil {
		return err
	}
	return restart(ctx, env, cl, victim, hit)
}

// pauseLeader: SIGSTOP of the leader's process group for pause (longer
// than the failure detection), the harness's failover after the
// detection time where the cluster has none (it fences the paused node),
// then SIGCONT of a node still there, or a fenced one started again.
func pauseLeader(ctx context.Context, env *compose.Env, cl compose.Cluster, resource string, pause time.Duration, hit func(string)) error {
	victim, of, err := leader(ctx, env, cl, resource)
	if err != nil {
		return err
	}
	if err := victim.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	hit(fmt.Sprintf("SIGSTOP of %s, the leader of %s, for %s (failure detection: %s)", victim.Name, of, pause, failureTimeout(cl)))
	start := time.Now()
	if _, ok := cl.(compose.Promoter); ok {
		if err := sleep(ctx, min(failureTimeout(cl), pause)); err != nil {
			return errors.Join(err, victim.Signal(syscall.SIGCONT))
		}
		if err := promote(ctx, env, cl, victim, time.Since(start), hit); err != nil {
			return errors.Join(err, victim.Signal(syscall.SIGCONT))
		}
	}
	if err := sleep(ctx, pause-time.Since(start)); err != nil {
		return errors.Join(err, victim.Signal(syscall.SIGCONT))
	}
	if victim.Proc.Running() {
		if err := victim.Signal(syscall.SIGCONT); err != nil {
			return err
		}
		hit(fmt.Sprintf("SIGCONT of %s after %s: it wakes up as a zombie leader", victim.Name, time.Since(start).Round(time.Second)))
	}
	return restart(ctx, env, cl, victim, hit)
}

// rollingRestart stops and starts every node in turn, each counted back
// in before the next: the followers first, the leaders of resource last.
func rollingRestart(ctx context.Context, env *compose.Env, cl compose.Cluster, resource string, hit func(string)) error {
	nodes := cl.Nodes(env)
	if ls, err := cl.Leaders(ctx, env, resource); err == nil {
		for i := len(ls) - 1; i >= 0; i-- {
			if j := slices.IndexFunc(nodes, func(n compose.Node) bool { return n.Name == ls[i].Name }); j >= 0 {
				n := nodes[j]
				nodes = append(slices.Delete(nodes, j, j+1), n)
			}
		}
	}
	for i, n := range nodes {
		if i == 0 {
			hit(fmt.Sprintf("rolling restart of %s, in this order: %s", cl.Name(), nodeNames(nodes)))
		}
		start := time.Now()
		if err := stop(ctx, env, cl, n); err != nil {
			return fmt.Errorf("stop %s: %w", n.Name, err)
		}
		hit(fmt.Sprintf("%s stopped in %s", n.Name, time.Since(start).Round(100*time.Millisecond)))
		if err := restart(ctx, env, cl, n, hit); err != nil {
			return err
		}
	}
	return nil
}

// killAfterLag: every follower stops copying from the leader (detached:
// the cluster's Lagger, or SIGSTOP) for lag, then the leader is killed,
// the followers resume, the harness fails over where the cluster does
// not, and the killed node is started again after down.
func killAfterLag(ctx context.Context, env *compose.Env, cl compose.Cluster, resource string, lag, down time.Duration, hit func(string)) error {
	victim, of, err := leader(ctx, env, cl, resource)
	if err != nil {
		return err
	}
	resume, how, err := detach(ctx, env, cl, victim)
	if err != nil {
		if resume != nil {
			err = errors.Join(err, resume(context.WithoutCancel(ctx)))
		}
		return err
	}
	hit(fmt.Sprintf("the followers of %s (the leader of %s) stop copying from it for %s: %s", victim.Name, of, lag, how))
	if err := sleep(ctx, lag); err != nil {
		return errors.Join(err, resume(context.WithoutCancel(ctx)))
	}
	kill := victim.Signal(syscall.SIGKILL)
	if kill == nil {
		hit(fmt.Sprintf("kill -9 of %s", victim.Name))
	}
	if err := errors.Join(kill, resume(ctx)); err != nil {
		return err
	}
	hit("the followers resume")
	if err := promote(ctx, env, cl, victim, 0, hit); err != nil {
		return err
	}
	if err := sleep(ctx, down); err != nil {
		return err
	}
	return restart(ctx, env, cl, victim, hit)
}

// detach makes every node but leader stop copying from it.
func detach(ctx context.Context, env *compose.Env, cl compose.Cluster, leader compose.Node) (func(context.Context) error, string, error) {
	if l, ok := cl.(compose.Lagger); ok {
		resume, err := l.Detach(ctx, env, leader)
		return resume, "their replication stopped", err
	}
	var paused []compose.Node
	resume := func(context.Context) error {
		var errs []error
		for _, n := range paused {
			errs = append(errs, n.Signal(syscall.SIGCONT))
		}
		return errors.Join(errs...)
	}
	for _, n := range cl.Nodes(env) {
		if n.Name == leader.Name || !n.Proc.Running() {
			continue
		}
		if err := n.Signal(syscall.SIGSTOP); err != nil {
			return resume, "", err
		}
		paused = append(paused, n)
	}
	return resume, "SIGSTOP of " + nodeNames(paused), nil
}

// promote runs the harness's failover of a cluster that has none of its
// own (compose.Promoter), once its failure detection would have noticed
// the node gone (after waited of it has passed already).
func promote(ctx context.Context, env *compose.Env, cl compose.Cluster, lost compose.Node, waited time.Duration, hit func(string)) error {
	p, ok := cl.(compose.Promoter)
	if !ok {
		return nil
	}
	if err := sleep(ctx, failureTimeout(cl)-waited); err != nil {
		return err
	}
	n, err := p.Failover(ctx, env, lost)
	if err != nil {
		return fmt.Errorf("fail %s over: %w", cl.Name(), err)
	}
	hit(fmt.Sprintf("the harness fenced %s and promoted %s", lost.Name, n.Name))
	return nil
}

// restart starts a node again and waits until the cluster counts it in.
func restart(ctx context.Context, env *compose.Env, cl compose.Cluster, n compose.Node, hit func(string)) error {
	start := time.Now()
	if err := cl.StartNode(ctx, env, n.Name); err != nil {
		return fmt.Errorf("start %s again: %w", n.Name, err)
	}
	hit(fmt.Sprintf("%s back in the cluster after %s", n.Name, time.Since(start).Round(100*time.Millisecond)))
	return nil
}

// stop stops a node gracefully (compose.NodeStopper), or with SIGTERM and
// SIGKILL after a minute.
func stop(ctx context.Context, env *compose.Env, cl compose.Cluster, n compose.Node) error {
	if s, ok := cl.(compose.NodeStopper); ok {
		return s.StopNode(ctx, env, n.Name)
	}
	return n.Proc.Kill(ctx, time.Minute)
}

// failureTimeout is how long cl takes to notice a node gone.
func failureTimeout(cl compose.Cluster) time.Duration {
	if d, ok := cl.(compose.FailureDetector); ok {
		return d.FailureTimeout()
	}
	return compose.DefaultFailureTimeout
}

func nodeNames(ns []compose.Node) string {
	var s string
	for i, n := range ns {
		if i > 0 {
			s += ", "
		}
		s += n.Name
	}
	return s
}

// sleep waits d, or returns ctx's error when it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	if !ctxtime.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// ErrNoWeakSetting marks a cluster without a weak setting
// (compose.Weakener): it has no failover control.
var ErrNoWeakSetting = errors.New("no weak setting")

// Weak puts service's cluster under its weak setting: the returned
// configuration carries its client settings (for the cells that run with
// it), the servers are changed where it says so, and restore undoes that.
func (s Stack) Weak(ctx context.Context, service string) (cfg config.Config, name string, restore func(context.Context) error, err error) {
	env, cl, err := s.Cluster(service)
	if err != nil {
		return s.Cfg, "", nil, err
	}
	w, ok := cl.(compose.Weakener)
	if !ok {
		return s.Cfg, "", nil, fmt.Errorf("%w: %s has no setting under which a failover loses confirmed writes", ErrNoWeakSetting, service)
	}
	weak := w.WeakSetting()
	cfg = s.Cfg
	for k, v := range weak.Settings {
		cfg = cfg.With(k, v)
	}
	restore = func(context.Context) error { return nil }
	if weak.Apply != nil {
		r, err := weak.Apply(ctx, env)
		if r != nil {
			restore = r
		}
		if err != nil {
			return cfg, weak.Name, restore, fmt.Errorf("%s: apply %s: %w", service, weak.Name, err)
		}
	}
	return cfg, weak.Name, restore, nil
}
