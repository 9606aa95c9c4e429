package rocketmq_test

import (
	"context"
	"testing"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

func newBroker(tb testing.TB) brokers.Broker {
	cfg := testenv.Require(tb, testenv.RocketMQ)
	b, err := rocketmq.New(context.Background(), cfg, nil)
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

// The largest message_size a workload accepts goes through at the
// broker's default limits.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, newBroker) }
