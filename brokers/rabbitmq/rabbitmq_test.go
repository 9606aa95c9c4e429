package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

func newBroker(tb testing.TB) brokers.Broker {
	cfg := testenv.Require(tb, testenv.RabbitMQ)
	b, err := rabbitmq.New(context.Background(), cfg, nil)
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

func TestConformance(t *testing.T) { brokertest.Run(t, newBroker) }

func BenchmarkRaw1KiB(b *testing.B) {
	brokertest.BenchMaxBatch(b, newBroker, brokertest.BenchOptions{Size: 1024}, 1, 100)
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
