package rocketmq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

// maxBatchBytes bounds one batch send (the broker refuses a request body
// over maxMessageSize, 4 MiB by default); a queue's messages beyond it go
// in further sends, one after another.
const maxBatchBytes = 1 << 20

// batchOverhead approximates what a message adds to a batch body besides
// its body: the fixed fields and the encoded properties.
const batchOverhead = 256

// queueSelector is the producer's selector. A message whose Queue the
// driver already chose (every message Publish sends: a batch carries the
// queue of its first message) goes there; any other (a dead-letter copy)
// is placed by the FNV-1a hash of its sharding key, which is how
// Publish chose the queue too (driverutil.Shard; the client's own hash
// selector computes the same), so a key's messages share one queue
// whichever path sent them.
type queueSelector struct{}

func (queueSelector) Select(m *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	if m.Queue != nil {
		return m.Queue
	}
	if k := m.GetShardingKey(); k != "" {
		return mqs[driverutil.Shard(k, len(mqs))]
	}
	return mqs[0]
}

var _ producer.QueueSelector = queueSelector{}

// topicState is what the driver keeps per topic it publishes to.
type topicState struct {
	mqs atomic.Pointer[[]*primitive.MessageQueue] // see publishQueues
	// The client hands a new topic's route to concurrent senders before
	// it records the brokers' addresses, so a send racing the first one
	// fails with "route info not found": the first send to a topic runs
	// alone (under mu), until one succeeded (warm).
	mu   sync.Mutex
	warm atomic.Bool
}

func (b *Broker) topic(topic string) *topicState {
	if v, ok := b.topics.Load(topic); ok {
		return v.(*topicState)
	}
	v, _ := b.topics.LoadOrStore(topic, &topicState{})
	return v.(*topicState)
}

// publishQueues returns the topic's write queues in the order the
// producer's selector sees them (both come from the same route
// conversion: sorted by broker name, then queue id), cached per topic.
func (b *Broker) publishQueues(ctx context.Context, topic string) ([]*primitive.MessageQueue, error) {
	ts := b.topic(topic)
	if p := ts.mqs.Load(); p != nil {
		return *p, nil
	}
	a, err := b.admin()
	if err != nil {
		return nil, err
	}
	mqs, err := a.FetchPublishMessageQueues(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: route of %s: %w", topic, err)
	}
	if len(mqs) == 0 {
		return nil, fmt.Errorf("rocketmq: route of %s has no write queues (run Setup first)", topic)
	}
	ts.mqs.Store(&mqs)
	return mqs, nil
}

// Publish implements brokers.Broker. Each message goes to the queue its
// key hashes to; the messages of one queue are sent in slice order as
// batch sends (one request and one confirmation for up to maxBatchBytes
// of messages), queues in parallel. A key's messages share a queue, so
// they keep their order. A failed send fails its messages and every later
// message of that queue, which is never sent: nothing overtakes a message
// that did not go.
func (b *Broker) Publish(ctx context.Context, topic string, msgs []brokers.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	p, err := b.producer()
	if err != nil {
		return fail(err)
	}
	mqs, err := b.publishQueues(ctx, topic)
	if err != nil {
		return fail(err)
	}
	byQueue := make([][]int, len(mqs))
	for i, m := range msgs {
		q := driverutil.Shard(m.Key, len(mqs))
		byQueue[q] = append(byQueue[q], i)
	}
	if ts := b.topic(topic); !ts.warm.Load() {
		for q, idx := range byQueue {
			if len(idx) == 0 {
				continue
			}
			ts.mu.Lock()
			if !ts.warm.Load() {
				if b.publishQueue(ctx, p, mqs[q], msgs, idx, errs) {
					ts.warm.Store(true)
				}
				byQueue[q] = nil
			}
			ts.mu.Unlock()
			break
		}
	}
	var wg sync.WaitGroup
	for q, idx := range byQueue {
		if len(idx) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.publishQueue(ctx, p, mqs[q], msgs, idx, errs)
		}()
	}
	wg.Wait()
	return errs
}

// publishQueue sends msgs[idx] (all bound for mq) in order, in batches,
// and reports whether all went.
func (b *Broker) publishQueue(ctx context.Context, p producerAPI, mq *primitive.MessageQueue, msgs []brokers.Message, idx []int, errs []error) bool {
	for start := 0; start < len(idx); {
		end, size := start, 0
		for end < len(idx) && (end == start || size+len(msgs[idx[end]].Body)+batchOverhead <= maxBatchBytes) {
			size += len(msgs[idx[end]].Body) + batchOverhead
			end++
		}
		batch := make([]*primitive.Message, 0, end-start)
		for _, i := range idx[start:end] {
			m := b.message(mq.Topic, msgs[i], nil)
			m.Queue = mq
			if end-start > 1 {
				// The client stamps a unique id only on single sends;
				// consumers see it as the message's MsgId.
				m.WithProperty(primitive.PropertyUniqueClientMessageIdKeyIndex, primitive.CreateUniqID())
			}
			batch = append(batch, m)
		}
		if err := b.sendBatch(ctx, p, batch); err != nil {
			first := msgs[idx[start]].ID
			for n, i := range idx[start:] {
				if start+n < end {
					errs[i] = fmt.Errorf("rocketmq: publish %s to %s: %w", msgs[i].ID, mq.Topic, err)
				} else {
					errs[i] = fmt.Errorf("rocketmq: publish %s to %s: not sent after the failed send of %s to its queue %d: %w", msgs[i].ID, mq.Topic, first, mq.QueueId, err)
				}
			}
			return false
		}
		start = end
	}
	return true
}

// message builds the client's message for m.
func (b *Broker) message(topic string, m brokers.Message, extra map[string]string) *primitive.Message {
	msg := primitive.NewMessage(topic, m.Body)
	msg.WithShardingKey(m.Key)
	if m.ID != "" {
		msg.WithKeys([]string{m.ID})
		msg.WithProperty(propID, m.ID)
	}
	for k, v := range m.Headers {
		msg.WithProperty(propHeaderPref+k, v)
	}
	for k, v := range extra {
		msg.WithProperty(k, v)
	}
	return msg
}

// brokerBusy is how the client reports SYSTEM_BUSY: the broker dropped
// the request from its send queue unprocessed (it waited there longer
// than waitTimeMillsInSendQueue, 200 ms by default: a CPU-starved
// broker) and asks the client to back off. The client has no typed error
// for it and does not retry it.
const brokerBusy = "CODE: 2,"

// sendBatch sends msgs (one topic, one queue) in one request and checks
// the confirmation. A send the broker refused as busy never reached its
// store, so it is sent again after a pause, for up to the send timeout.
func (b *Broker) sendBatch(ctx context.Context, p producerAPI, msgs []*primitive.Message) error {
	deadline := time.Now().Add(b.sendTimeout)
	pause := 20 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := p.SendSync(ctx, msgs...)
		if err != nil && strings.HasPrefix(err.Error(), brokerBusy) && time.Now().Add(pause).Before(deadline) {
			if !ctxtime.Sleep(ctx, pause) {
				return err
			}
			pause = min(2*pause, time.Second)
			continue
		}
		if err != nil {
			return err
		}
		return checkStatus(res)
	}
}

func checkStatus(res *primitive.SendResult) error {
	if res.Status != primitive.SendOK {
		return fmt.Errorf("broker answered status %d (flush or slave timeout): not durable as configured", res.Status)
	}
	return nil
}

// send publishes one message (a dead-letter copy) with the hash selector.
func (b *Broker) send(ctx context.Context, p producerAPI, topic string, m brokers.Message, extra map[string]string) error {
	ts := b.topic(topic)
	if !ts.warm.Load() {
		ts.mu.Lock()
		defer ts.mu.Unlock()
	}
	if err := b.sendBatch(ctx, p, []*primitive.Message{b.message(topic, m, extra)}); err != nil {
		return fmt.Errorf("rocketmq: publish %s to %s: %w", m.ID, topic, err)
	}
	ts.warm.Store(true)
	return nil
}
