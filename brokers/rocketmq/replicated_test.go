package rocketmq_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
)

// TestReplicatedFailoverMasterKill publishes while the broker group's
// master is killed (kill -9) and started again: the controller makes a
// slave of the SyncStateSet the master, the producer and the consumer
// find it from the name server, and every confirmed message must be
// delivered. Needs the replicated stack (`bench stack up --topology
// replicated rocketmq`).
func TestReplicatedFailoverMasterKill(t *testing.T) {
	replicatedFailover(t, syscall.SIGKILL, 8*time.Second)
}

// TestReplicatedFailoverMasterPause pauses the master (SIGSTOP) past the
// controller's failure detection, then resumes it: the zombie master
// must not take confirmed messages with it.
func TestReplicatedFailoverMasterPause(t *testing.T) {
	replicatedFailover(t, syscall.SIGSTOP, 20*time.Second)
}

func replicatedFailover(t *testing.T, sig syscall.Signal, down time.Duration) {
	replicatedFailoverWith(t, sig, down, 0, false)
}

// replicatedFailoverWith hits the leader after pausing its followers for
// lag (0: not), with the cluster's weak setting when weak.
func replicatedFailoverWith(t *testing.T, sig syscall.Signal, down, lag time.Duration, weak bool) brokertest.FailoverResult {
	cfg, e, cluster := brokertest.Replicated(t, "rocketmq")
	if weak {
		var name string
		cfg, name = brokertest.Weaken(t, cfg, e, cluster)
		t.Logf("weak setting: %s", name)
	}
	b, err := rocketmq.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() }) // after the topic's clean-up
	res := brokertest.Failover(t, brokertest.FailoverSpec{
		Broker: b, Env: e, Cluster: cluster, Shards: 4, Rate: 200, Signal: sig,
		Resource: func(topic string) string { return topic },
		Before:   5 * time.Second, Down: down, After: 10 * time.Second, Lag: lag, StopConsumer: lag > 0, Lossy: weak,
	})
	if res.Published == 0 || (!weak && res.Delivered < res.Published) {
		t.Errorf("delivered %d of %d confirmed", res.Delivered, res.Published)
	}
	return res
}

// TestReplicatedDurability: on the replicated stack the report shows
// controller mode's settings and the three brokers in the SyncStateSet.
func TestReplicatedDurability(t *testing.T) {
	cfg, _, _ := brokertest.Replicated(t, "rocketmq")
	b, err := rocketmq.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	m := brokertest.Durability(t, b, "allAckInSyncStateSet", "minInSyncReplicas", "in-sync replicas", "replicas", "replication")
	if m["allAckInSyncStateSet"] != "true" || m["minInSyncReplicas"] != "2" || !strings.HasPrefix(m["in-sync replicas"], "3 ") || !strings.HasPrefix(m[brokers.ReplicatedKey], "yes") {
		t.Errorf("want allAckInSyncStateSet=true, minInSyncReplicas=2 and 3 in-sync replicas: %v", m)
	}
}

// TestReplicatedFailoverLaggingSlaves pauses the slaves for 5 s (inside
// the SyncStateSet's 15 s window), kills the master and resumes them:
// with allAckInSyncStateSet the master confirmed nothing the slaves did
// not have, so a slave elected from the set loses nothing.
func TestReplicatedFailoverLaggingSlaves(t *testing.T) {
	replicatedFailoverWith(t, syscall.SIGKILL, 8*time.Second, 5*time.Second, false)
}

// TestReplicatedWeakLosesConfirmed is the failover control: the same
// fault with allAckInSyncStateSet=false must lose confirmed messages
// (the master confirmed alone while its slaves were paused, and one of
// them is elected), every time.
func TestReplicatedWeakLosesConfirmed(t *testing.T) {
	res := replicatedFailoverWith(t, syscall.SIGKILL, 8*time.Second, 5*time.Second, true)
	if len(res.Lost) == 0 {
		t.Errorf("the weak setting lost no confirmed message: the control does not show what it should")
	}
}
