package kafkashare_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/kafkashare"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// driver is the driver on the local stack's Kafka, embedded the one on
// kfake.
var (
	driver   = brokertest.OnStack(kafkashare.Name, testenv.Kafka)
	embedded = brokertest.Opener(func(_ testing.TB, opts brokers.Options) (brokers.Broker, error) {
		return kafkashare.NewEmbeddedForTest(opts)
	})
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
}
func TestConformanceEmbedded(t *testing.T) {
	brokertest.Run(t, embedded.New, brokertest.WithWindow(embedded.Window))
}

func BenchmarkRaw1KiB(b *testing.B)   { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)  { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B) { brokertest.Drain1KiB(b, driver.New) }

func TestNoAcceptBeforeVerdict(t *testing.T)         { noAcceptBeforeVerdict(t, driver.New) }
func TestNoAcceptBeforeVerdictEmbedded(t *testing.T) { noAcceptBeforeVerdict(t, embedded.New) }

// noAcceptBeforeVerdict proves that a record handed to the Handler is
// never accepted before its verdict. A share consumer's next poll accepts
// every record of the previous one that has no acknowledgement: so while
// the Handler holds record a (it blocks), more records are published and
// nothing else may reach the Handler (the member must not poll); then the
// Handler answers Crash, and a new subscription of the group must get a
// again, as a redelivery. A driver that polled meanwhile would have
// accepted a, which would never come back.
func noAcceptBeforeVerdict(t *testing.T, newBroker brokertest.NewBroker) {
	b := newBroker(t)
	topic := brokertest.Topic(t, b, 1)
	group := brokertest.UniqueName(t, "g")
	msgs := brokertest.Events(t, brokertest.UniqueName(t, "e"), 1, 4, 0)
	a := msgs[0]
	brokertest.Publish(t, b, topic, msgs[:1], time.Minute)

	held, answer := make(chan struct{}), make(chan brokers.Verdict)
	var others atomic.Int32
	first, err := b.Subscribe(t.Context(), topic, group, brokers.SubscribeOptions{}, brokers.PerDelivery(func(ctx context.Context, d *brokers.Delivery) brokers.Verdict {
		if d.ID != a.ID {
			others.Add(1)
			return brokers.Retry
		}
		close(held)
		select {
		case v := <-answer:
			return v
		case <-ctx.Done():
			return brokers.Retry
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatalf("%s: %s was not delivered", b.Name(), a.ID)
	}
	brokertest.Publish(t, b, topic, msgs[1:], time.Minute)
	time.Sleep(3 * time.Second) // several fetch waits: a member that polls would have got them
	if n := others.Load(); n > 0 {
		t.Fatalf("%s: %d other records reached the Handler while it held %s: the member polled before its verdict, which accepts it", b.Name(), n, a.ID)
	}
	answer <- brokers.Crash
	select {
	case <-first.Done():
	case <-time.After(time.Minute):
		t.Fatalf("%s: the subscription did not end after a Crash", b.Name())
	}

	c := brokertest.NewCollector(b.Name(), msgs)
	second, err := b.Subscribe(t.Context(), topic, group, brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	c.WaitAll(t, 2*time.Minute)
	again := c.Deliveries(a.ID)[0]
	if again.DeliveryCount < 2 || !again.Redelivered {
		t.Errorf("%s: %s came back with DeliveryCount %d, Redelivered %v; want a redelivery", b.Name(), a.ID, again.DeliveryCount, again.Redelivered)
	}
}
