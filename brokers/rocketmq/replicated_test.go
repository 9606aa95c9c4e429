package rocketmq_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
)

// replicated is the driver on the replicated stack; the topic's shards
// are the topic's queues.
var replicated = brokertest.ReplicatedDriver{Name: rocketmq.Name, Resource: func(topic string) string { return topic }}

// TestReplicatedFailoverMasterKill publishes while the broker group's
// master is killed (kill -9) and started again: the controller makes a
// slave of the SyncStateSet the master, the producer and the consumer
// find it from the name server, and every confirmed message must be
// delivered. Needs the replicated stack (`bench stack up --topology
// replicated rocketmq`).
func TestReplicatedFailoverMasterKill(t *testing.T) {
	replicated.Failover(t, brokertest.Fault{Signal: syscall.SIGKILL, Down: 8 * time.Second})
}

// TestReplicatedFailoverMasterPause pauses the master (SIGSTOP) past the
// controller's failure detection, then resumes it: the zombie master
// must not take confirmed messages with it.
func TestReplicatedFailoverMasterPause(t *testing.T) {
	replicated.Failover(t, brokertest.Fault{Signal: syscall.SIGSTOP, Down: 20 * time.Second})
}

// TestReplicatedDurability: on the replicated stack the report shows
// controller mode's settings and the three brokers in the SyncStateSet.
func TestReplicatedDurability(t *testing.T) {
	m := replicated.Durability(t, "allAckInSyncStateSet", "minInSyncReplicas", "in-sync replicas", "replicas", "replication")
	if m["allAckInSyncStateSet"] != "true" || m["minInSyncReplicas"] != "2" || !strings.HasPrefix(m["in-sync replicas"], "3 ") || !strings.HasPrefix(m[brokers.ReplicatedKey], "yes") {
		t.Errorf("want allAckInSyncStateSet=true, minInSyncReplicas=2 and 3 in-sync replicas: %v", m)
	}
}

// TestReplicatedFailoverLaggingSlaves pauses the slaves for 5 s (inside
// the SyncStateSet's 15 s window), kills the master and resumes them:
// with allAckInSyncStateSet the master confirmed nothing the slaves did
// not have, so a slave elected from the set loses nothing.
func TestReplicatedFailoverLaggingSlaves(t *testing.T) {
	replicated.Failover(t, brokertest.LaggingKill())
}

// TestReplicatedWeakLosesConfirmed is the failover control: the same
// fault with allAckInSyncStateSet=false must lose confirmed messages
// (the master confirmed alone while its slaves were paused, and one of
// them is elected), every time.
func TestReplicatedWeakLosesConfirmed(t *testing.T) {
	replicated.WeakControl(t)
}
