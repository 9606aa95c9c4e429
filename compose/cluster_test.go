package compose

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// replicatedEnv is the Env of the replicated stack the tests' stack
// directory holds, after checking every node of services answers (failing
// by name otherwise: `make test` starts the stack for the tests named
// Replicated, which run apart).
func replicatedEnv(t *testing.T, services ...string) *Env {
	t.Helper()
	c := core.Config(t)
	dir := core.StackDir(t, c)
	cfg, err := ApplyVariant(c.With("stack.dir", dir).With(SettingTopology, TopologyReplicated))
	if err != nil {
		t.Fatalf("the replicated stack's endpoints: %v", err)
	}
	core.Reachable(t, cfg, VariantFlag(VariantReplicated), services...)
	return &Env{Dir: dir, Variant: VariantReplicated, Cfg: cfg, Out: testWriter{t}}
}

// TestReplicatedKafkaCluster: the three nodes are healthy with one quorum
// leader among them, every command's seeds are the three, and a topic
// created with the broker's default replication factor lives on all three
// nodes with min.insync.replicas 2 — the settings failover relies on.
func TestReplicatedKafkaCluster(t *testing.T) {
	e := replicatedEnv(t, core.Kafka)
	k := &KafkaCluster{}
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

// TestReplicatedPostgresCluster: one primary, one standby streaming
// synchronously from it; the endpoint reaches the primary; a committed
// row is on the standby when COMMIT returns (synchronous_commit=on with a
// synchronous standby waits for its flush; it is read there once
// replayed).
func TestReplicatedPostgresCluster(t *testing.T) {
	e := replicatedEnv(t, core.Postgres)
	c := &PostgresCluster{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	roles := map[string]string{}
	for _, n := range c.NodeStatus(ctx, e) {
		if !n.Healthy {
			t.Errorf("%s is not healthy: %s", n.Name, n.Detail)
		}
		roles[n.Role] = n.Name
		if n.Role == "primary" && !strings.Contains(n.Detail, "(sync)") {
			t.Errorf("the primary %s has no synchronous standby: %s", n.Name, n.Detail)
		}
	}
	if roles["primary"] == "" || roles["standby"] == "" {
		t.Fatalf("roles %v, want a primary and a standby", roles)
	}
	ls, err := c.Leaders(ctx, e, "")
	if err != nil || len(ls) != 1 || ls[0].Name != roles["primary"] {
		t.Fatalf("Leaders = %v, %v; want the primary %s", ls, err, roles["primary"])
	}
	conn, err := pgx.Connect(ctx, e.Cfg.PGURL)
	if err != nil {
		t.Fatalf("connect with the endpoint %s: %v", e.Cfg.PGURL, err)
	}
	defer conn.Close(context.Background())
	var port int
	if err := conn.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil || ls[0].Addr != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("the endpoint reached port %d (%v), want the primary %s", port, err, ls[0].Addr)
	}
	table := fmt.Sprintf("replicated_test_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE TABLE "+table+" (v int); INSERT INTO "+table+" VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP TABLE "+table) //nolint:errcheck
	standby := pgClusterNodes[0]
	if roles["standby"] == pgClusterNodes[1].name {
		standby = pgClusterNodes[1]
	}
	sconn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", filepath.Join(c.dir(e, standby), "run"), standby.port, pgSuperuser, pgAppDB))
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close(context.Background())
	var v int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = sconn.QueryRow(ctx, "SELECT v FROM "+table).Scan(&v); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || v != 42 {
		t.Errorf("the committed row on the standby: %d, %v", v, err)
	}
}
