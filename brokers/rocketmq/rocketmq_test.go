package rocketmq_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

func newBroker(tb testing.TB) brokers.Broker { return newBrokerWith(tb, nil) }

// newBrokerWindow is newBroker with a publish window of n messages.
func newBrokerWindow(tb testing.TB, n int) brokers.Broker {
	return newBrokerWith(tb, brokers.Options{rocketmq.OptPublishWindow: strconv.Itoa(n)})
}

func newBrokerWith(tb testing.TB, opts brokers.Options) brokers.Broker {
	cfg := testenv.Require(tb, testenv.RocketMQ)
	b, err := rocketmq.New(context.Background(), cfg, opts)
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

// The largest message_size a workload accepts goes through at the
// broker's default limits.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, newBroker) }
