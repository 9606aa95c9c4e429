package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/compose/internal/stacktest"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// TestReplicatedKafkaCluster: the three nodes are healthy with one quorum
// leader among them, every command's seeds are the three, and a topic
// created with the broker's default replication factor lives on all three
// nodes with min.insync.replicas 2 — the settings failover relies on.
func TestReplicatedKafkaCluster(t *testing.T) {
	e := stacktest.ReplicatedEnv(t, core.Kafka)
	k := &Cluster{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leaders := 0
	for _, n := range k.NodeStatus(ctx, e) {
		if !n.Healthy {
			t.Errorf("%s is not healthy: %s", n.Name, n.Detail)
		}
		if n.Role == "leader" {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d nodes say they lead the metadata quorum, want 1", leaders)
	}
	if got := e.Cfg.Get(kafkabroker.SettingBrokers); got != strings.Join(kafkaClusterSeeds(), ",") {
		t.Errorf("kafka.brokers = %q, want the three nodes", got)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Cfg.List(kafkabroker.SettingBrokers)...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := fmt.Sprintf("inboxbench-replicated-%d", time.Now().UnixNano())
	if _, err := adm.CreateTopic(ctx, 6, -1, nil, topic); err != nil {
		t.Fatalf("create %s with the default replication factor: %v", topic, err)
	}
	defer adm.DeleteTopics(context.Background(), topic) //nolint:errcheck
	var td kadm.TopicDetail
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		tds, err := adm.ListTopics(ctx, topic)
		if err == nil && tds[topic].Err == nil && len(tds[topic].Partitions) == 6 {
			td = tds[topic]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not ready: %v", topic, err)
		}
	}
	for _, p := range td.Partitions {
		if len(p.Replicas) != 3 || len(p.ISR) != 3 {
			t.Errorf("partition %d: replicas %v, in sync %v; want all three nodes", p.Partition, p.Replicas, p.ISR)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if rc, err := rcs.On(topic, nil); err != nil {
		t.Fatal(err)
	} else {
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" && c.MaybeValue() != "2" {
				t.Errorf("min.insync.replicas = %s, want 2", c.MaybeValue())
			}
		}
	}
	ls, err := k.Leaders(ctx, e, topic)
	if err != nil || len(ls) == 0 {
		t.Fatalf("Leaders(%s) = %v, %v", topic, ls, err)
	}
	if !strings.HasPrefix(ls[0].Name, "kafka-") || !ls[0].Proc.Running() {
		t.Errorf("the leader %+v is not a running node of the cluster", ls[0])
	}
}
