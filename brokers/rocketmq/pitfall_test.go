package rocketmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// The driver consumes with an orderly consumer of its own instead of
// rocketmq-client-go's orderly push consumer. These tests verify, against
// the real broker, the behaviour of the client's consumer that decided
// it; if one starts failing, the client changed and brokers/README.md
// ("RocketMQ: which client path, and why") should say so. They run the
// client's consumer, which has data races of its own: "LibConsumer" in
// their names keeps them out of `make test`'s -race run (every other test
// of the driver runs under -race).

// orderlyClientConsumer starts the client's orderly push consumer on
// topic with a fresh group; h answers each single-message callback.
func orderlyClientConsumer(t *testing.T, topic string, h func(*primitive.MessageExt) consumer.ConsumeResult) {
	t.Helper()
	cfg := testenv.Require(t, testenv.RocketMQ)
	pc, err := consumer.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(cfg.List(rocketmq.SettingNamesrv))),
		consumer.WithGroupName(brokertest.UniqueName(t, "g")),
		consumer.WithInstance(brokertest.UniqueName(t, "i")),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumerOrder(true),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithMaxReconsumeTimes(-1),
		consumer.WithConsumeMessageBatchMaxSize(1),
	)
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return h(ms[0]), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Shutdown() })
}

func pitfallTopic(t *testing.T, keys, perKey int) (string, []brokers.Message) {
	t.Helper()
	b := driver.New(t)
	topic := brokertest.Topic(t, b, 1)
	msgs := brokertest.Events(t, brokertest.UniqueName(t, "e"), keys, perKey, 0)
	brokertest.Publish(t, b, topic, msgs, 30*time.Second)
	return topic, msgs
}

// TestRocketMQLibConsumerOrderlyRetryLaterDrops: an orderly consumer that
// answers ConsumeRetryLater never sees that message again (the client
// commits past it).
func TestRocketMQLibConsumerOrderlyRetryLaterDrops(t *testing.T) {
	topic, msgs := pitfallTopic(t, 1, 3)
	var mu sync.Mutex
	seen := map[string]int{}
	orderlyClientConsumer(t, topic, func(m *primitive.MessageExt) consumer.ConsumeResult {
		mu.Lock()
		defer mu.Unlock()
		id := m.GetProperty("ib-id")
		seen[id]++
		if id == msgs[0].ID && seen[id] == 1 {
			return consumer.ConsumeRetryLater
		}
		return consumer.ConsumeSuccess
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		last := seen[msgs[2].ID]
		mu.Unlock()
		if last > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rocketmq: the last message never arrived")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // time for a redelivery that never comes
	mu.Lock()
	defer mu.Unlock()
	if seen[msgs[0].ID] > 1 {
		t.Fatalf("rocketmq: ConsumeRetryLater in orderly mode redelivered %s (%d calls): the client no longer drops it; update brokers/README.md (RocketMQ: which client path)", msgs[0].ID, seen[msgs[0].ID])
	}
	t.Logf("confirmed: after ConsumeRetryLater the orderly consumer moved on; %s was handled %d time(s) and is lost to this group", msgs[0].ID, seen[msgs[0].ID])
}

// TestRocketMQLibConsumerOrderlyFirstPullWaits: with messages waiting,
// the client's orderly consumer delivers the first one only after its
// pull loop's 3 s back-off ("not locked in broker": the queue was locked
// before its process queue existed). A lower bound, so a busy machine
// cannot make it fail; the driver's own consumer delivers within
// milliseconds (see the timeline in brokers/README.md).
func TestRocketMQLibConsumerOrderlyFirstPullWaits(t *testing.T) {
	topic, _ := pitfallTopic(t, 1, 1)
	first := make(chan time.Time, 1)
	start := time.Now()
	orderlyClientConsumer(t, topic, func(*primitive.MessageExt) consumer.ConsumeResult {
		select {
		case first <- time.Now():
		default:
		}
		return consumer.ConsumeSuccess
	})
	select {
	case at := <-first:
		if d := at.Sub(start); d < 2500*time.Millisecond {
			t.Fatalf("rocketmq: the client's orderly consumer delivered the first message %v after start: the 3 s first-pull back-off is gone; update brokers/README.md (RocketMQ: which client path)", d)
		} else {
			t.Logf("confirmed: first delivery %v after the consumer started", d.Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rocketmq: no delivery within 30 s")
	}
}
