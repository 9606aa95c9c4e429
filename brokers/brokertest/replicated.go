package brokertest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
)

// ReplicatedDriver is a driver's tests on the replicated stack (`bench
// stack up --topology replicated NAME`).
type ReplicatedDriver struct {
	// Name is the driver's registry name, and the stack's service it
	// runs against.
	Name string
	// Resource names the topic's shards for the cluster's Leaders
	// (FailoverSpec.Resource).
	Resource func(topic string) string
}

// Fault is how a failover test hits the leader: with Signal, for Down,
// after pausing its followers for Lag (0: not; the consumer stops for
// that long too), with the cluster's weak setting when Weak.
type Fault struct {
	Signal    syscall.Signal
	Down, Lag time.Duration
	Weak      bool
}

// LaggingKill kills the leader for 8 s after holding its followers back
// for 5 s: the moment a weak setting loses what the leader alone
// confirmed.
func LaggingKill() Fault {
	return Fault{Signal: syscall.SIGKILL, Down: 8 * time.Second, Lag: 5 * time.Second}
}

// Failover runs Failover with f against the driver on the replicated
// stack: 4 shards, 200 messages a second, 5 s before the fault and 10 s
// after. Unless f.Weak, every confirmed message must be delivered.
func (d ReplicatedDriver) Failover(t *testing.T, f Fault) FailoverResult {
	cfg, e, cluster := Replicated(t, d.Name)
	if f.Weak {
		var name string
		cfg, name = Weaken(t, cfg, e, cluster)
		t.Logf("weak setting: %s", name)
	}
	b := d.open(t, cfg)
	res := Failover(t, FailoverSpec{
		Broker: b, Env: e, Cluster: cluster, Shards: 4, Rate: 200, Signal: f.Signal, Resource: d.Resource,
		Before: 5 * time.Second, Down: f.Down, After: 10 * time.Second, Lag: f.Lag, StopConsumer: f.Lag > 0, Lossy: f.Weak,
	})
	if res.Published == 0 || (!f.Weak && res.Delivered < res.Published) {
		t.Errorf("delivered %d of %d confirmed", res.Delivered, res.Published)
	}
	return res
}

// WeakControl is the failover control: LaggingKill with the cluster's
// weak setting must lose confirmed messages, every time, or the failover
// tests could not tell a lossy cluster from a safe one.
func (d ReplicatedDriver) WeakControl(t *testing.T) {
	f := LaggingKill()
	f.Weak = true
	if res := d.Failover(t, f); len(res.Lost) == 0 {
		t.Errorf("the weak setting lost no confirmed message: the control does not show what it should")
	}
}

// Durability is Durability of the driver on the replicated stack.
func (d ReplicatedDriver) Durability(t *testing.T, keys ...string) map[string]string {
	cfg, _, _ := Replicated(t, d.Name)
	return Durability(t, d.open(t, cfg), keys...)
}

// open opens the driver with cfg until the test ends (after the clean-up
// of its topics, registered later).
func (d ReplicatedDriver) open(t *testing.T, cfg config.Config) brokers.Broker {
	b, err := brokers.Open(context.Background(), d.Name, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
