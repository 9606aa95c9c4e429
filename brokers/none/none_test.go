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

// driver opens the driver (in this process).
var driver = brokertest.InProcess(none.Name)

func TestConformance(t *testing.T) { brokertest.Run(t, driver.New) }

func BenchmarkRaw1KiB(b *testing.B)   { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)  { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B) { brokertest.Drain1KiB(b, driver.New) }

func TestOptionsRejectUnknown(t *testing.T) {
	_, err := none.New(context.Background(), config.Default(), brokers.Options{"shards": "4"})
	if err == nil || !strings.Contains(err.Error(), "none") || !strings.Contains(err.Error(), "shards") {
		t.Fatalf("want an error naming the driver and the option, got %v", err)
	}
}

func TestPublishWithoutSetupFails(t *testing.T) {
	b := driver.New(t)
	err := brokers.FirstError(b.Publish(context.Background(), brokertest.UniqueName(t, "ib"), brokertest.Events(t, "e", 1, 1, 0)))
	if err == nil || !strings.Contains(err.Error(), "none: topic") {
		t.Fatalf("want an error naming the driver and the topic, got %v", err)
	}
}

func TestSetupShardCountMustMatch(t *testing.T) { brokertest.SetupKeepsShards(t, driver.New(t)) }

// The queues are process-wide: a new instance (a consumer restarted after
// a crash) sees what another instance published and left unacked.
func TestStateSharedAcrossInstances(t *testing.T) {
	ctx := context.Background()
	pub := driver.New(t)
	topic := brokertest.Topic(t, pub, 2)
	msgs := brokertest.Events(t, "e", 1, 3, 0)
	brokertest.Publish(t, pub, topic, msgs, 10*time.Second)

	first := driver.New(t)
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

	second := driver.New(t)
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
	b := driver.New(t)
	topic := brokertest.Topic(t, b, 1)
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

// The transport's negative control has nothing to settle early here:
// Subscribe refuses it rather than run as a correct consumer.
func TestSettleOnReceiptRefused(t *testing.T) {
	b := driver.New(t)
	topic := brokertest.Topic(t, b, 1)
	_, err := b.Subscribe(context.Background(), topic, "g", brokers.SubscribeOptions{SettleOnReceipt: true}, brokers.PerDelivery(func(context.Context, *brokers.Delivery) brokers.Verdict { return brokers.Ack }))
	if err == nil || !strings.Contains(err.Error(), "SettleOnReceipt") {
		t.Fatalf("Subscribe with SettleOnReceipt: %v, want it refused", err)
	}
}
