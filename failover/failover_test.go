package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/workload"

	_ "github.com/inboxbench/inboxbench/brokers/all"
)

// TestCheckRefusesTheSingleNodeStack: on the single-node stack a fault has
// nothing to fail over to, and says what to run instead; a broker that
// runs as no service has no node at all; a replicated stack whose nodes
// this stack did not start is not hit. No server is needed.
func TestCheckRefusesTheSingleNodeStack(t *testing.T) {
	s := Stack{Cfg: config.Default(), Dir: t.TempDir()}
	err := s.Check(workload.TargetBroker, "kafka")
	if !errors.Is(err, ErrNotReplicated) || !strings.Contains(err.Error(), "--topology replicated") {
		t.Errorf("Check(broker, kafka) on the single-node stack = %v, want ErrNotReplicated naming --topology replicated", err)
	}
	if err := s.Check(workload.TargetPostgres, "none"); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Check(postgres, none) on the single-node stack = %v, want ErrNotReplicated", err)
	}
	if err := s.Check(workload.TargetBroker, "none"); !errors.Is(err, ErrNotReplicated) || !strings.Contains(err.Error(), "none runs as no service") {
		t.Errorf("Check(broker, none) = %v, want none named as running no service", err)
	}
	// A replicated stack whose directory ran nothing: its nodes (or
	// another checkout's on the same ports) are not this stack's to hit.
	r := Stack{Cfg: config.Default().With(compose.SettingTopology, compose.TopologyReplicated), Dir: t.TempDir()}
	for _, c := range []struct{ target, broker string }{{workload.TargetBroker, "kafka"}, {workload.TargetPostgres, "none"}} {
		err := r.Check(c.target, c.broker)
		if !errors.Is(err, ErrNotRunHere) || !strings.Contains(err.Error(), "bench stack up --topology replicated") {
			t.Errorf("Check(%s, %s) on a replicated stack that runs nothing: %v, want ErrNotRunHere naming the command", c.target, c.broker, err)
		}
	}
	if Service(workload.TargetPostgres, "kafka") != "postgres" || Service(workload.TargetBroker, "kafka") != "kafka" {
		t.Error("Service maps the targets wrongly")
	}
}

// replicated returns the replicated stack the tests' stack directory
// holds, failing by name when a node of services does not answer.
func replicated(t *testing.T, services ...string) Stack {
	t.Helper()
	cfg := testenv.Replicated(t, services...)
	return Stack{Cfg: cfg, Dir: testenv.StackDir(t, cfg)}
}

// hits collects what a fault reports.
type hits struct {
	mu   sync.Mutex
	list []string
}

func (h *hits) add(s string) { h.mu.Lock(); h.list = append(h.list, s); h.mu.Unlock() }

func (h *hits) text() string { h.mu.Lock(); defer h.mu.Unlock(); return strings.Join(h.list, "; ") }

// TestReplicatedKafkaLeaderKill kills the node leading most of a topic's
// partitions: the cluster elects other leaders, every record produced
// with acks=all before the kill is still there, and the killed node is
// back in every partition's in-sync set when the fault returns.
func TestReplicatedKafkaLeaderKill(t *testing.T) {
	s := replicated(t, testenv.Kafka)
	env, cl, err := s.Cluster("kafka")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seeds := s.Cfg.List(kafkabroker.SettingBrokers)
	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	adm := kadm.NewClient(kc)
	topic := fmt.Sprintf("inboxbench-failover-%d", time.Now().UnixNano())
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic) //nolint:errcheck
	const n = 300
	for i := range n {
		if err := kc.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	var h hits
	f := workload.FailoverFault{Kind: workload.FailoverLeaderKill, Target: workload.TargetBroker, At: 0.5, Down: workload.Duration(2 * time.Second)}
	if err := Do(ctx, env, cl, f, topic, h.add); err != nil {
		t.Fatalf("leader-kill: %v (did: %s)", err, h.text())
	}
	if !strings.Contains(h.text(), "kill -9 of kafka-") || !strings.Contains(h.text(), "back in the cluster") {
		t.Errorf("the fault reported %q, want the kill and the node back", h.text())
	}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tds[topic].Partitions {
		if p.Leader < 0 || len(p.ISR) != 3 {
			t.Errorf("partition %d after the fault: leader %d, in sync %v", p.Partition, p.Leader, p.ISR)
		}
	}
	got := consumeAll(ctx, t, seeds, topic, n)
	if got != n {
		t.Errorf("%d of %d records produced with acks=all before the kill read back", got, n)
	}
}

// consumeAll reads topic from the start until want records came, or 30 s
// passed without one.
func consumeAll(ctx context.Context, t *testing.T, seeds []string, topic string, want int) int {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]bool{}
	for len(seen) < want {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := c.PollFetches(fctx)
		timedOut := fctx.Err() != nil
		cancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
		if timedOut {
			break
		}
	}
	return len(seen)
}

// TestReplicatedPostgresFailover kills the primary: the harness promotes
// the standby, the endpoint reaches it, a row committed before the kill
// is there (the standby had it: synchronous replication), and the old
// primary is back as a synchronous standby of the new one.
func TestReplicatedPostgresFailover(t *testing.T) {
	s := replicated(t, testenv.Postgres)
	env, cl, err := s.Cluster("postgres")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before, err := cl.Leaders(ctx, env, "")
	if err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprintf("failover_test_%d", time.Now().UnixNano())
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, s.Cfg.PGURL)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE " + table + " (v int); INSERT INTO " + table + " VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	defer exec("DROP TABLE " + table) //nolint:errcheck
	var h hits
	f := workload.FailoverFault{Kind: workload.FailoverLeaderKill, Target: workload.TargetPostgres, At: 0.5, Down: workload.Duration(time.Second)}
	if err := Do(ctx, env, cl, f, "", h.add); err != nil {
		t.Fatalf("leader-kill: %v (did: %s)", err, h.text())
	}
	after, err := cl.Leaders(ctx, env, "")
	if err != nil || len(after) != 1 || after[0].Name == before[0].Name {
		t.Fatalf("primary before %s, after %v (%v): want the other node", before[0].Name, after, err)
	}
	if !strings.Contains(h.text(), "promoted "+after[0].Name) {
		t.Errorf("the fault reported %q, want the promotion of %s", h.text(), after[0].Name)
	}
	conn, err := pgx.Connect(ctx, s.Cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v, port int
	if err := conn.QueryRow(ctx, "SELECT v, inet_server_port() FROM "+table).Scan(&v, &port); err != nil || v != 7 {
		t.Errorf("the row committed before the kill: %d, %v", v, err)
	}
	if after[0].Addr != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("the endpoint reached port %d, want the new primary %s", port, after[0].Addr)
	}
	for _, n := range cl.NodeStatus(ctx, env) {
		switch {
		case !n.Healthy:
			t.Errorf("%s after the failover: %s", n.Name, n.Detail)
		case n.Name == before[0].Name && n.Role != "standby":
			t.Errorf("the old primary %s is %s, want standby", n.Name, n.Role)
		case n.Name == after[0].Name && !strings.Contains(n.Detail, before[0].Name+" streaming (sync)"):
			t.Errorf("the new primary %s: %s; want %s as its synchronous standby", n.Name, n.Detail, before[0].Name)
		}
	}
}
