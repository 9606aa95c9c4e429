package none_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/none"
	"github.com/inboxbench/inboxbench/config"
)

func newBroker(tb testing.TB) brokers.Broker {
	b, err := none.New(context.Background(), config.Default(), nil)
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

func TestOptionsRejectUnknown(t *testing.T) {
	_, err := none.New(context.Background(), config.Default(), brokers.Options{"shards": "4"})
	if err == nil || !strings.Contains(err.Error(), "none") || !strings.Contains(err.Error(), "shards") {
		t.Fatalf("want an error naming the driver and the option, got %v", err)
	}
}

func TestPublishWithoutSetupFails(t *testing.T) {
	b := newBroker(t)
	err := brokers.FirstError(b.Publish(context.Background(), brokertest.UniqueName(t, "ib"), brokertest.Events(t, "e", 1, 1, 0)))
	if err == nil || !strings.Contains(err.Error(), "none: topic") {
		t.Fatalf("want an error naming the driver and the topic, got %v", err)
	}
}

func TestSetupShardCountMustMatch(t *testing.T) {
	b := newBroker(t)
	ctx := context.Background()
	topic := brokertest.UniqueName(t, "ib")
	defer b.(brokers.TopicDeleter).DeleteTopic(ctx, topic)
	if err := b.Setup(ctx, topic, 3); err != nil {
		t.Fatal(err)
	}
	if err := b.Setup(ctx, topic, 3); err != nil {
		t.Fatalf("Setup is not idempotent: %v", err)
	}
	if err := b.Setup(ctx, topic, 2); err == nil {
		t.Fatal("Setup with another shard count succeeded")
	}
}

// The queues are process-wide: a new instance (a consumer restarted after
// a crash) sees what another instance published and left unacked.
func TestStateSharedAcrossInstances(t *testing.T) {
	ctx := context.Background()
	pub := newBroker(t)
	topic := brokertest.UniqueName(t, "ib")
	if err := pub.Setup(ctx, topic, 2); err != nil {
		t.Fatal(err)
	}
	defer pub.(brokers.TopicDeleter).DeleteTopic(ctx, topic)
	msgs := brokertest.Events(t, "e", 1, 3, 0)
	brokertest.Publish(t, pub, topic, msgs, 10*time.Second)

	first := newBroker(t)
	sub, err := first.Subscribe(ctx, topic, "g", brokers.SubscribeOptions{MaxBatch: 10},
		func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
			vs := make([]brokers.Verdict, len(ds))
			vs[len(vs)-1] = brokers.Crash
			return vs
		})
	if err != nil {
		t.Fatal(err)
	}
	<-sub.Done()
	if !errors.Is(sub.Err(), brokers.ErrCrashed) {
		t.Fatalf("Err() = %v, want ErrCrashed", sub.Err())
	}
	_ = first.Close()

	second := newBroker(t)
	var got atomic.Value
	done := make(chan struct{})
	sub, err = second.Subscribe(ctx, topic, "g", brokers.SubscribeOptions{MaxBatch: 10},
		func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
			if got.CompareAndSwap(nil, ds) {
				close(done)
			}
			return make([]brokers.Verdict, len(ds))
		})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the second instance got nothing")
	}
	ds := got.Load().([]*brokers.Delivery)
	if len(ds) != len(msgs) {
		t.Fatalf("redelivered batch of %d, want the whole crashed batch of %d", len(ds), len(msgs))
	}
	for i, d := range ds {
		if d.ID != msgs[i].ID || !d.Redelivered || d.DeliveryCount != 2 {
			t.Errorf("delivery %d: ID %s (want %s) Redelivered %v DeliveryCount %d (want true, 2)", i, d.ID, msgs[i].ID, d.Redelivered, d.DeliveryCount)
		}
	}
}

// A shard is owned by one subscription at a time; when the owner closes,
// a waiting subscription takes it over and gets the rest.
func TestShardTakeOver(t *testing.T) {
	ctx := context.Background()
	b := newBroker(t)
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	defer b.(brokers.TopicDeleter).DeleteTopic(ctx, topic)
	var firstN, secondN atomic.Int64
	count := func(n *atomic.Int64) brokers.Handler {
		return brokers.PerDelivery(func(context.Context, *brokers.Delivery) brokers.Verdict {
			n.Add(1)
			return brokers.Ack
		})
	}
	first, err := b.Subscribe(ctx, topic, "g", brokers.SubscribeOptions{}, count(&firstN))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the first take the shard
	second, err := b.Subscribe(ctx, topic, "g", brokers.SubscribeOptions{}, count(&secondN))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	brokertest.Publish(t, b, topic, brokertest.Events(t, "a", 2, 5, 0), 10*time.Second)
	waitFor(t, func() bool { return firstN.Load() == 10 })
	if secondN.Load() != 0 {
		t.Fatalf("the waiting subscription handled %d while the first owned the shard", secondN.Load())
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	brokertest.Publish(t, b, topic, brokertest.Events(t, "b", 2, 5, 0), 10*time.Second)
	waitFor(t, func() bool { return secondN.Load() == 10 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
