package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

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

// Select implements the client's producer.QueueSelector.
func (queueSelector) Select(m *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	if m.Queue != nil {
		return m.Queue
	}
	if k := m.GetShardingKey(); k != "" {
		return mqs[driverutil.Shard(k, len(mqs))]
	}
	return mqs[0]
}

// topicState is what the driver keeps per topic it publishes to.
type topicState struct {
	route atomic.Pointer[publishRoute] // see publishQueues

	smu     sync.Mutex
	senders []*queueSender // one per write queue, started on first use
	dropped bool           // DeleteTopic or Close: no senders any more
}

// publishRoute is a topic's write queues, as the selector sees them, and
// the master address of each broker name.
type publishRoute struct {
	mqs     []*primitive.MessageQueue
	masters map[string]string
}

func (b *Broker) topic(topic string) *topicState {
	if v, ok := b.topics.Load(topic); ok {
		return v.(*topicState)
	}
	v, _ := b.topics.LoadOrStore(topic, &topicState{})
	return v.(*topicState)
}

// publishRoute returns the topic's route for sending, from the name
// servers on first use (or again with refresh), cached per topic.
func (b *Broker) publishRoute(ctx context.Context, topic string, refresh bool) (*publishRoute, error) {
	ts := b.topic(topic)
	if p := ts.route.Load(); p != nil && !refresh {
		return p, nil
	}
	rt, err := b.rm.fetchRoute(ctx, b.namesrv, topic)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: route of %s: %w", topic, err)
	}
	if len(rt.writes) == 0 {
		return nil, fmt.Errorf("rocketmq: route of %s has no write queues (run Setup first)", topic)
	}
	pr := &publishRoute{masters: rt.masters}
	for _, q := range rt.writes {
		pr.mqs = append(pr.mqs, &primitive.MessageQueue{Topic: topic, BrokerName: q.BrokerName, QueueId: q.QueueID})
	}
	ts.route.Store(pr)
	return pr, nil
}

// publishQueues returns the topic's write queues in the order the
// selector sees them: sorted by broker name, then queue id.
func (b *Broker) publishQueues(ctx context.Context, topic string) ([]*primitive.MessageQueue, error) {
	pr, err := b.publishRoute(ctx, topic, false)
	if err != nil {
		return nil, err
	}
	return pr.mqs, nil
}

// masterOf returns the address of the master broker named brokerName
// that topic's route names, asking the name servers again when the
// cached route has none.
func (b *Broker) masterOf(ctx context.Context, topic, brokerName string) (string, error) {
	for _, refresh := range []bool{false, true} {
		pr, err := b.publishRoute(ctx, topic, refresh)
		if err != nil {
			return "", err
		}
		if a := pr.masters[brokerName]; a != "" {
			return a, nil
		}
	}
	return "", fmt.Errorf("rocketmq: the route of %s names no master for broker %s", topic, brokerName)
}

// Publish implements brokers.Broker: PublishAsync and a wait.
func (b *Broker) Publish(ctx context.Context, topic string, msgs []brokers.Message) []error {
	return brokers.PublishWait(ctx, b, topic, msgs)
}

// PublishAsync implements brokers.AsyncPublisher. Each message goes to the
// queue its key hashes to, into the buffer of that queue's sender, which
// blocks while OptPublishWindow of the queue's messages are unconfirmed.
// A sender has one request in flight: it sends everything buffered (up to
// maxBatchBytes) as one batch send, waits for its confirmation, settles
// those messages, then sends what came meanwhile. A key's messages share a
// queue, so they keep slice and call order, and a send the broker refused
// as busy is sent again before anything later of its queue. A failed send
// fails its messages only.
func (b *Broker) PublishAsync(ctx context.Context, topic string, msgs []brokers.Message, done func([]error)) {
	queues := func() ([]*queueSender, error) { return b.senders(ctx, topic) }
	driverutil.Spread(ctx, b.calls.Start(ctx, topic, msgs, done), queues)
}

// senders returns the topic's queue senders, starting them on first use.
func (b *Broker) senders(ctx context.Context, topic string) ([]*queueSender, error) {
	ts := b.topic(topic)
	ts.smu.Lock()
	qs, dropped := ts.senders, ts.dropped
	ts.smu.Unlock()
	if qs != nil {
		return qs, nil
	}
	if dropped {
		return nil, fmt.Errorf("rocketmq: publish to %s: the topic was deleted or the broker closed", topic)
	}
	p, err := b.producer()
	if err != nil {
		return nil, err
	}
	mqs, err := b.publishQueues(ctx, topic)
	if err != nil {
		return nil, err
	}
	b.mu.Lock() // Close waits for the senders started before it
	defer b.mu.Unlock()
	if b.subs.Closed() {
		return nil, errors.New("rocketmq: broker is closed")
	}
	ts.smu.Lock()
	defer ts.smu.Unlock()
	if ts.dropped {
		return nil, fmt.Errorf("rocketmq: publish to %s: the topic was deleted", topic)
	}
	if ts.senders != nil {
		return ts.senders, nil
	}
	qs = make([]*queueSender, len(mqs))
	for i, mq := range mqs {
		qs[i] = &queueSender{b: b, p: p, mq: mq, window: make(chan struct{}, b.window),
			wake: make(chan struct{}, 1), stop: make(chan struct{})}
		b.sending.Add(1)
		go qs[i].run()
	}
	ts.senders = qs
	return qs, nil
}

// dropSenders stops the topic's senders: what they hold fails.
func (ts *topicState) dropSenders() {
	ts.smu.Lock()
	qs := ts.senders
	ts.senders, ts.dropped = nil, true
	ts.smu.Unlock()
	for _, q := range qs {
		close(q.stop)
	}
}

// queueSender sends one queue's messages in hand-over order, one request
// at a time.
type queueSender struct {
	b      *Broker
	p      producerAPI
	mq     *primitive.MessageQueue
	window chan struct{} // a token per message handed over and not settled
	wake   chan struct{} // the buffer grew (capacity 1)
	stop   chan struct{} // closed by dropSenders

	mu      sync.Mutex
	buf     []queued // handed over, not sent yet
	stopped bool     // the buffer takes nothing more
}

// queued is a message in a sender's buffer: msgs[i] of call p.
type queued struct {
	p *driverutil.Pending
	i int
	m *brokers.Message
}

// Send implements driverutil.Queue: it hands m over to the sender once the
// window has room; false when ctx ended first (p failed the message then).
func (q *queueSender) Send(ctx context.Context, p *driverutil.Pending, i int, m *brokers.Message) bool {
	select {
	case q.window <- struct{}{}:
	case <-ctx.Done():
		return false
	case <-q.stop:
		p.SettleInCall(i, fmt.Errorf("rocketmq: publish %s to %s: the topic was deleted or the broker closed", m.ID, q.mq.Topic))
		return true
	}
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		p.SettleInCall(i, fmt.Errorf("rocketmq: publish %s to %s: the topic was deleted or the broker closed", m.ID, q.mq.Topic))
		<-q.window
		return true
	}
	q.buf = append(q.buf, queued{p, i, m})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// run sends the buffer until stop; then it fails what is left.
func (q *queueSender) run() {
	defer q.b.sending.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-q.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var batch []queued
	for {
		q.mu.Lock()
		batch = q.take(batch[:0])
		q.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				q.failRest()
				return
			}
		}
		q.send(ctx, batch)
	}
}

// take moves the oldest buffered messages, up to maxBatchBytes (at least
// one), from the buffer to batch, dropping those whose call has already
// finished (its ctx ended: they failed). q.mu is held.
func (q *queueSender) take(batch []queued) []queued {
	size, n := 0, 0
	for n < len(q.buf) {
		e := q.buf[n]
		w := len(e.m.Body) + batchOverhead
		if len(batch) > 0 && size+w > maxBatchBytes {
			break
		}
		n++
		if e.p.Done() {
			<-q.window
			continue
		}
		size += w
		batch = append(batch, e)
	}
	clear(q.buf[:n])
	q.buf = q.buf[n:]
	if len(q.buf) == 0 {
		q.buf = q.buf[:0:0] // let the backing array go once drained
	}
	return batch
}

// send sends batch as one request and settles its messages.
func (q *queueSender) send(ctx context.Context, batch []queued) {
	msgs := make([]*primitive.Message, len(batch))
	for k, e := range batch {
		m := q.b.message(q.mq.Topic, *e.m, nil)
		m.Queue = q.mq
		if len(batch) > 1 {
			// The client stamps a unique id only on single sends;
			// consumers see it as the message's MsgId.
			m.WithProperty(primitive.PropertyUniqueClientMessageIdKeyIndex, primitive.CreateUniqID())
		}
		msgs[k] = m
	}
	err := q.b.sendBatch(ctx, q.p, msgs)
	for _, e := range batch {
		var eerr error
		if err != nil {
			eerr = fmt.Errorf("rocketmq: publish %s to %s queue %d: %w", e.m.ID, q.mq.Topic, q.mq.QueueId, err)
		}
		e.p.Settle(e.i, eerr)
		<-q.window
	}
}

// failRest fails what is still buffered after stop.
func (q *queueSender) failRest() {
	q.mu.Lock()
	rest := q.buf
	q.buf, q.stopped = nil, true
	q.mu.Unlock()
	for _, e := range rest {
		e.p.Settle(e.i, fmt.Errorf("rocketmq: publish %s to %s: the topic was deleted or the broker closed", e.m.ID, q.mq.Topic))
		<-q.window
	}
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

// busy reports SYSTEM_BUSY: the broker dropped the request from its send
// queue unprocessed (it waited there longer than
// waitTimeMillsInSendQueue, 200 ms by default: a CPU-starved broker) and
// asks the client to back off.
func busy(err error) bool {
	var re *RemotingError
	return errors.As(err, &re) && re.Code == resSystemBusy
}

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
		if busy(err) && time.Now().Add(pause).Before(deadline) {
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

// send publishes one message (a dead-letter copy) with the driver's
// producer and the hash selector.
func (b *Broker) send(ctx context.Context, topic string, m brokers.Message, extra map[string]string) error {
	if err := b.sendBatch(ctx, b.prod, []*primitive.Message{b.message(topic, m, extra)}); err != nil {
		return fmt.Errorf("rocketmq: publish %s to %s: %w", m.ID, topic, err)
	}
	return nil
}
