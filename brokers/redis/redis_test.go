package redis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/redis"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// driver is the driver on the local stack.
var driver = brokertest.OnStack(redis.Name, testenv.Redis)

func TestConformance(t *testing.T) {
	brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
}

func BenchmarkRaw1KiB(b *testing.B)   { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)  { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B) { brokertest.Drain1KiB(b, driver.New) }

func TestSetupRejectsFewerShards(t *testing.T) { brokertest.SetupKeepsShards(t, driver.New(t)) }

// The largest message_size a workload accepts goes through.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, driver.New) }

// The driver reports what a reply to XADD means on the real server, with
// a yes/no verdict on fsync.
func TestDurability(t *testing.T) {
	brokertest.Durability(t, driver.New(t), "appendonly", "appendfsync", "server")
}

// A subscription of the same group waits while another reads the stream
// (the lease); when the reader crashes, it takes the stream over and
// reads the entries the crashed one left pending before any newer one, so
// no key is handled by both at once or out of order, and the crashed
// delivery comes back with a delivery count of 2. Once every entry is
// acknowledged the stream is trimmed. (Without the lease both read the
// stream at once: the collector sees a key handled concurrently.)
func TestTakeoverReadsPendingFirst(t *testing.T) {
	cfg := testenv.Require(t, testenv.Redis)
	b := driver.New(t)
	topic := brokertest.Topic(t, b, 1)
	group := brokertest.UniqueName(t, "g")
	msgs := brokertest.Events(t, brokertest.UniqueName(t, "e"), 4, 50, 0)
	target := msgs[121].ID
	c := brokertest.NewCollector(b.Name(), msgs)
	var crashed atomic.Bool
	c.Decide = func(d *brokers.Delivery, _ *envelope.Event) brokers.Verdict {
		time.Sleep(2 * time.Millisecond) // both subscriptions would be busy at once
		if d.ID == target && crashed.CompareAndSwap(false, true) {
			return brokers.Crash
		}
		return brokers.Ack
	}
	brokertest.Publish(t, b, topic, msgs, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := brokers.SubscribeOptions{Prefetch: 16}
	first, err := b.Subscribe(ctx, topic, group, opts, brokers.PerDelivery(c.Handle))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	c.WaitFor(t, "the first subscription to read", time.Minute, func() bool { return c.AckedCount() > 0 })
	other, err := b.Subscribe(ctx, topic, group, opts, brokers.PerDelivery(c.Handle))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c.WaitAll(t, time.Minute)
	c.Check(t, true)
	if !errors.Is(first.Err(), brokers.ErrCrashed) {
		t.Errorf("the first subscription ended with %v, want ErrCrashed", first.Err())
	}
	ds := c.Deliveries(target)
	if again := ds[len(ds)-1]; len(ds) < 2 || again.DeliveryCount != 2 || !again.Redelivered {
		t.Errorf("%s delivered %d times, the last with DeliveryCount %d, Redelivered %v", target, len(ds), again.DeliveryCount, again.Redelivered)
	}

	o, err := goredis.ParseURL(cfg.Get(redis.SettingURL))
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(o)
	defer rc.Close()
	stream := redis.StreamName(topic, 0)
	c.WaitFor(t, "the stream to be trimmed", 30*time.Second, func() bool {
		n, err := rc.XLen(ctx, stream).Result()
		return err == nil && n < int64(len(msgs))
	})
}
