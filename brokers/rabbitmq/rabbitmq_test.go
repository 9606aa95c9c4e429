package rabbitmq_test

import (
	"context"
	"errors"
	"io"
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

// driver is the driver on the local stack.
var driver = brokertest.OnStack(rabbitmq.Name, testenv.RabbitMQ)

func TestConformance(t *testing.T) {
	brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
}

func BenchmarkRaw1KiB(b *testing.B)   { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)  { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B) { brokertest.Drain1KiB(b, driver.New) }

// Publishing to a topic whose queues are missing is an error, never a
// silent drop.
func TestPublishUnknownTopicFails(t *testing.T) {
	b := driver.New(t)
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
	b := driver.New(t)
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
	b := driver.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := brokertest.Topic(t, b, 2)
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

func TestSetupRejectsFewerShards(t *testing.T) { brokertest.SetupKeepsShards(t, driver.New(t)) }

// The largest message_size a workload accepts goes through at the
// broker's default limits.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, driver.New) }

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
	topic := brokertest.Topic(t, b, 1)
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

// replicated is the driver on the replicated stack; the topic's shards
// are its "<topic>." queues.
var replicated = brokertest.ReplicatedDriver{Name: rabbitmq.Name, Resource: func(topic string) string { return topic + "." }}

// TestReplicatedFailoverLeaderKill publishes with confirms while the
// leader of the topic's quorum queues is killed (kill -9) and started
// again: every confirmed message must be delivered, the publisher and
// the consumer moving to the surviving nodes. Needs the replicated stack
// (`bench stack up --topology replicated rabbitmq`).
func TestReplicatedFailoverLeaderKill(t *testing.T) {
	replicated.Failover(t, brokertest.Fault{Signal: syscall.SIGKILL, Down: 8 * time.Second})
}

// TestReplicatedFailoverLeaderPause pauses the leader's VM (SIGSTOP)
// past the cluster's failure detection, then resumes it: a zombie
// leader must lose no confirmed message either.
func TestReplicatedFailoverLeaderPause(t *testing.T) {
	replicated.Failover(t, brokertest.Fault{Signal: syscall.SIGSTOP, Down: 25 * time.Second})
}

// TestReplicatedDurability: on the replicated stack the driver declares
// three-member quorum queues and verifies them, and sees three nodes of
// one cluster.
func TestReplicatedDurability(t *testing.T) {
	m := replicated.Durability(t, "queue type", "quorum members", "nodes", "replication")
	if !strings.HasPrefix(m["quorum members"], "3 (verified") || !strings.Contains(m["nodes"], "3 given") || !strings.Contains(m["nodes"], "3 answering") || !strings.HasPrefix(m[brokers.ReplicatedKey], "yes") {
		t.Errorf("want 3 verified quorum members and 3 nodes answering: %v", m)
	}
}

// TestReplicatedFailoverLaggingFollowers pauses the followers for 5 s,
// kills the leader and resumes them: a quorum queue confirms nothing
// without a majority, so nothing confirmed is lost.
func TestReplicatedFailoverLaggingFollowers(t *testing.T) {
	replicated.Failover(t, brokertest.LaggingKill())
}

// TestReplicatedWeakLosesConfirmed is the failover control: classic
// queues published to without the mandatory flag lose every message
// published while their node is down (RabbitMQ confirms and drops it),
// every time.
func TestReplicatedWeakLosesConfirmed(t *testing.T) {
	replicated.WeakControl(t)
}
