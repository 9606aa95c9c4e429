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

// TestLibraryPitfallOrderlyRetryLaterDrops verifies, against the real
// broker, the client behaviour the driver works around: an orderly
// consumer that answers ConsumeRetryLater never sees that message again
// (the client commits past it). If this test starts failing, the client
// was fixed and the driver's package doc should say so; the driver itself
// never returns ConsumeRetryLater (see RetryNotLost in the suite).
func TestLibraryPitfallOrderlyRetryLaterDrops(t *testing.T) {
	cfg := testenv.Require(t, testenv.RocketMQ)
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	defer b.(brokers.TopicDeleter).DeleteTopic(ctx, topic)
	msgs := brokertest.Events(t, brokertest.UniqueName(t, "e"), 1, 3, 0)
	brokertest.Publish(t, b, topic, msgs, 30*time.Second)

	var mu sync.Mutex
	seen := map[string]int{}
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
		mu.Lock()
		defer mu.Unlock()
		id := ms[0].GetProperty("ib-id")
		seen[id]++
		if id == msgs[0].ID && seen[id] == 1 {
			return consumer.ConsumeRetryLater, nil
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()
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
		t.Fatalf("rocketmq: ConsumeRetryLater in orderly mode redelivered %s (%d calls): the client no longer drops it; update the driver docs", msgs[0].ID, seen[msgs[0].ID])
	}
	t.Logf("confirmed: after ConsumeRetryLater the orderly consumer moved on; %s was handled %d time(s) and is lost to this group", msgs[0].ID, seen[msgs[0].ID])
}
