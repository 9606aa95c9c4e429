package rabbitmq_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/compose"
	rabbitstack "github.com/inboxbench/inboxbench/compose/rabbitmq"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

func newBroker(tb testing.TB) brokers.Broker { return newBrokerWith(tb, nil) }

// newBrokerWindow is newBroker with a publish window of n messages.
func newBrokerWindow(tb testing.TB, n int) brokers.Broker {
	return newBrokerWith(tb, brokers.Options{rabbitmq.OptPublishWindow: strconv.Itoa(n)})
}

func newBrokerWith(tb testing.TB, opts brokers.Options) brokers.Broker {
	cfg := testenv.Require(tb, testenv.RabbitMQ)
	b, err := rabbitmq.New(context.Background(), cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return b
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, newBroker, brokertest.WithWindow(newBrokerWindow))
}

func BenchmarkRaw1KiB(b *testing.B) {
	brokertest.BenchMaxBatch(b, newBroker, brokertest.BenchOptions{Size: 1024}, 1, 100)
}

// BenchmarkRate1KiB publishes open loop at low rates with handler batches
// of up to 500: a driver that waited to fill a batch, or whose fetch
// lingered, would show it in the batch sizes and the latency from the
// due time.
func BenchmarkRate1KiB(b *testing.B) {
	brokertest.BenchRate(b, newBroker, brokertest.BenchOptions{Size: 1024, MaxBatch: 500}, 200, 2000)
}

// BenchmarkDrain1KiB times consuming a preloaded backlog: the consumer
// side alone, where MaxBatch shows.
func BenchmarkDrain1KiB(b *testing.B) {
	brokertest.BenchMaxBatch(b, newBroker, brokertest.BenchOptions{Size: 1024, Preload: true}, 1, 100)
}

// Publishing to a topic whose queues are missing is an error, never a
// silent drop.
func TestPublishUnknownTopicFails(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := brokertest.UniqueName(t, "ib")
	err := brokers.FirstError(b.Publish(ctx, topic, brokertest.Events(t, "e", 1, 1, 0)))
	if err == nil || !strings.Contains(err.Error(), "rabbitmq") {
		t.Fatalf("want an error naming rabbitmq, got %v", err)
	}
}

// A queue deleted behind the driver's back turns into a returned
// (unroutable) message error.
func TestPublishUnroutableFails(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.(*rabbitmq.Broker).DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	err := brokers.FirstError(b.Publish(ctx, topic, brokertest.Events(t, "e", 1, 1, 0)))
	if err == nil || !strings.Contains(err.Error(), "unroutable") {
		t.Fatalf("want an unroutable error, got %v", err)
	}
}

// With one of two queues deleted, exactly the messages routed to it fail
// as unroutable, a repeated id included; the others are confirmed. The
// driver matches each basic.return to its message by id and queue.
func TestPublishUnroutableFailsOnlyItsMessages(t *testing.T) {
	cfg := testenv.Require(t, testenv.RabbitMQ)
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 2); err != nil {
		t.Fatal(err)
	}
	defer b.(*rabbitmq.Broker).DeleteTopic(ctx, topic)
	conn, err := amqp.Dial(cfg.Get(rabbitmq.SettingURL))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(topic+".1", false, false, false); err != nil {
		t.Fatal(err)
	}
	msgs := brokertest.Events(t, "e", 8, 2, 0)
	for _, m := range msgs {
		if driverutil.Shard(m.Key, 2) == 1 {
			msgs = append(msgs, m) // the same id again, to the missing queue
			break
		}
	}
	errs := b.Publish(ctx, topic, msgs)
	lost := 0
	for i, m := range msgs {
		switch missing := driverutil.Shard(m.Key, 2) == 1; {
		case missing && (errs[i] == nil || !strings.Contains(errs[i].Error(), "unroutable")):
			t.Errorf("message %d (%s, to the deleted queue): want an unroutable error, got %v", i, m.ID, errs[i])
		case !missing && errs[i] != nil:
			t.Errorf("message %d (%s): %v", i, m.ID, errs[i])
		case missing:
			lost++
		}
	}
	if lost == 0 || lost == len(msgs) {
		t.Fatalf("%d of %d messages went to the deleted queue: the keys do not cover both queues", lost, len(msgs))
	}
}

func TestSetupRejectsFewerShards(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 3); err != nil {
		t.Fatal(err)
	}
	defer b.(*rabbitmq.Broker).DeleteTopic(ctx, topic)
	if err := b.Setup(ctx, topic, 3); err != nil {
		t.Fatalf("Setup is not idempotent: %v", err)
	}
	if err := b.Setup(ctx, topic, 2); err == nil {
		t.Fatal("Setup with fewer shards than exist succeeded")
	}
}

// The largest message_size a workload accepts goes through at the
// broker's default limits.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, newBroker) }

// TestPublishBlockedByAlarmFailsNamingIt raises a real memory alarm on the
// running broker (a watermark of almost nothing, through the node's own
// rabbitmqctl) and publishes: RabbitMQ blocks the publishing connection
// and confirms nothing, and Publish must fail within its confirm timeout,
// naming the alarm, instead of waiting for as long as the run lasts. Then
// the watermark is restored (also in a cleanup, whatever happens) and
// publishing works again. The alarm lasts a few seconds: the broker is
// shared.
func TestPublishBlockedByAlarmFailsNamingIt(t *testing.T) {
	cfg := testenv.Require(t, testenv.RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, e := &rabbitstack.Service{}, &compose.Env{Dir: testenv.StackDir(t, cfg), Cfg: cfg, Out: io.Discard}
	limit := func() string {
		out, err := node.Ctl(ctx, e, "eval", "vm_memory_monitor:get_memory_limit().")
		if err != nil {
			t.Fatalf("this test raises an alarm with the stack's own rabbitmqctl: %v", err)
		}
		return strings.TrimSpace(out)
	}
	before := limit()

	const timeout = 2 * time.Second
	b, err := rabbitmq.New(ctx, cfg, brokers.Options{rabbitmq.OptConfirmTimeout: timeout.String()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.DeleteTopic(context.Background(), topic) })
	msgs := brokertest.Events(t, "e", 4, 4, 512)
	if err := brokers.FirstError(b.Publish(ctx, topic, msgs)); err != nil {
		t.Fatalf("publish before the alarm: %v", err)
	}

	restored := false
	restore := func() {
		if restored {
			return
		}
		if _, err := node.Ctl(context.Background(), e, "set_vm_memory_high_watermark", "absolute", rabbitstack.MemoryWatermark); err != nil {
			t.Errorf("RESTORE THE WATERMARK BY HAND (rabbitmqctl set_vm_memory_high_watermark absolute %s): %v", rabbitstack.MemoryWatermark, err)
			return
		}
		restored = true
	}
	t.Cleanup(restore)
	if _, err := node.Ctl(ctx, e, "set_vm_memory_high_watermark", "0.0000001"); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	for deadline := time.Now().Add(30 * time.Second); err == nil; {
		if time.Now().After(deadline) {
			restore()
			t.Fatal("publishing went on for 30s with a watermark of almost nothing: no alarm blocked it")
		}
		start := time.Now()
		err = brokers.FirstError(b.Publish(ctx, topic, msgs))
		took = time.Since(start)
	}
	restore()

	t.Logf("publish under the alarm failed after %s: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, rabbitmq.ErrBlocked) || !strings.Contains(err.Error(), "memory or disk alarm") {
		t.Errorf("the error does not name the alarm: %v", err)
	}
	if took > timeout+5*time.Second {
		t.Errorf("Publish returned after %s, the confirm timeout is %s", took, timeout)
	}
	if after := limit(); after != before {
		t.Errorf("memory limit %s after restoring, %s before", after, before)
	}
	// The driver recovers once the alarm clears.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		err := brokers.FirstError(b.Publish(ctx, topic, msgs))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publishing still fails 30s after the alarm was cleared: %v", err)
		}
	}
}

func TestConfirmTimeoutOption(t *testing.T) {
	cfg := testenv.Config(t)
	for _, bad := range []string{"0s", "-1s", "soon"} {
		if _, err := rabbitmq.New(context.Background(), cfg, brokers.Options{rabbitmq.OptConfirmTimeout: bad}); err == nil || !strings.Contains(err.Error(), rabbitmq.OptConfirmTimeout) {
			t.Errorf("%s=%q: error %v, want one naming the option", rabbitmq.OptConfirmTimeout, bad, err)
		}
	}
	if _, err := rabbitmq.New(context.Background(), cfg, brokers.Options{rabbitmq.OptConfirmTimeout: "500ms"}); err != nil {
		t.Fatal(err)
	}
}

// TestReplicatedFailoverLeaderKill publishes with confirms while the
// leader of the topic's quorum queues is killed (kill -9) and started
// again: every confirmed message must be delivered, the publisher and
// the consumer moving to the surviving nodes. Needs the replicated stack
// (`bench stack up --topology replicated rabbitmq`).
func TestReplicatedFailoverLeaderKill(t *testing.T) {
	replicatedFailover(t, syscall.SIGKILL, 8*time.Second)
}

// TestReplicatedFailoverLeaderPause pauses the leader's VM (SIGSTOP)
// past the cluster's failure detection, then resumes it: a zombie
// leader must lose no confirmed message either.
func TestReplicatedFailoverLeaderPause(t *testing.T) {
	replicatedFailover(t, syscall.SIGSTOP, 25*time.Second)
}

func replicatedFailover(t *testing.T, sig syscall.Signal, down time.Duration) {
	replicatedFailoverWith(t, sig, down, 0, false)
}

// replicatedFailoverWith hits the leader after pausing its followers for
// lag (0: not), with the cluster's weak setting when weak.
func replicatedFailoverWith(t *testing.T, sig syscall.Signal, down, lag time.Duration, weak bool) brokertest.FailoverResult {
	cfg, e, cluster := brokertest.Replicated(t, "rabbitmq")
	if weak {
		var name string
		cfg, name = brokertest.Weaken(t, cfg, e, cluster)
		t.Logf("weak setting: %s", name)
	}
	b, err := rabbitmq.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() }) // after the topic's clean-up
	res := brokertest.Failover(t, brokertest.FailoverSpec{
		Broker: b, Env: e, Cluster: cluster, Shards: 4, Rate: 200, Signal: sig,
		Resource: func(topic string) string { return topic + "." },
		Before:   5 * time.Second, Down: down, After: 10 * time.Second, Lag: lag, StopConsumer: lag > 0, Lossy: weak,
	})
	if res.Published == 0 || (!weak && res.Delivered < res.Published) {
		t.Errorf("delivered %d of %d confirmed", res.Delivered, res.Published)
	}
	return res
}

// TestReplicatedDurability: on the replicated stack the driver declares
// three-member quorum queues and verifies them, and sees three nodes of
// one cluster.
func TestReplicatedDurability(t *testing.T) {
	cfg, _, _ := brokertest.Replicated(t, "rabbitmq")
	b, err := rabbitmq.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	m := brokertest.Durability(t, b, "queue type", "quorum members", "nodes", "replication")
	if !strings.HasPrefix(m["quorum members"], "3 (verified") || !strings.Contains(m["nodes"], "3 given") || !strings.Contains(m["nodes"], "3 answering") || !strings.HasPrefix(m[brokers.ReplicatedKey], "yes") {
		t.Errorf("want 3 verified quorum members and 3 nodes answering: %v", m)
	}
}

// TestReplicatedFailoverLaggingFollowers pauses the followers for 5 s,
// kills the leader and resumes them: a quorum queue confirms nothing
// without a majority, so nothing confirmed is lost.
func TestReplicatedFailoverLaggingFollowers(t *testing.T) {
	replicatedFailoverWith(t, syscall.SIGKILL, 8*time.Second, 5*time.Second, false)
}

// TestReplicatedWeakLosesConfirmed is the failover control: classic
// queues published to without the mandatory flag lose every message
// published while their node is down (RabbitMQ confirms and drops it),
// every time.
func TestReplicatedWeakLosesConfirmed(t *testing.T) {
	res := replicatedFailoverWith(t, syscall.SIGKILL, 8*time.Second, 5*time.Second, true)
	if len(res.Lost) == 0 {
		t.Errorf("the weak setting lost no confirmed message: the control does not show what it should")
	}
}
