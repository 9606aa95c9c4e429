package rocketmq

import (
	"strconv"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// TestQueueSelectorMatchesTheClientsHash: a key's queue is the same
// whether Publish chose it (driverutil.Shard) or a message without a
// chosen queue went through the selector, and both agree with the
// client's own hash selector, which the driver used before: keys keep
// their queues across the change.
func TestQueueSelectorMatchesTheClientsHash(t *testing.T) {
	mqs := make([]*primitive.MessageQueue, 8)
	for i := range mqs {
		mqs[i] = &primitive.MessageQueue{Topic: "t", BrokerName: "broker-a", QueueId: i}
	}
	hash := producer.NewHashQueueSelector()
	for i := range 200 {
		m := primitive.NewMessage("t", nil)
		m.WithShardingKey("key-" + strconv.Itoa(i))
		if got, want := (queueSelector{}).Select(m, mqs, ""), hash.Select(m, mqs, ""); got != want {
			t.Fatalf("key-%d: selector chose queue %d, the client's hash selector %d", i, got.QueueId, want.QueueId)
		}
	}
	m := primitive.NewMessage("t", nil)
	m.WithShardingKey("key-1")
	m.Queue = mqs[5]
	if got := (queueSelector{}).Select(m, mqs, ""); got != mqs[5] {
		t.Fatalf("a message whose queue was chosen went to queue %d, want 5", got.QueueId)
	}
}
