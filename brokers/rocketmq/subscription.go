package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// DefaultGroup is used when Subscribe is given an empty group.
const DefaultGroup = "inboxbench"

// maxBatch is rocketmq-client-go's upper bound for
// ConsumeMessageBatchMaxSize (its Start rejects more).
const maxBatch = 1024

// pushConsumer is the part of the client's push consumer the driver uses.
type pushConsumer interface {
	Start() error
	Shutdown() error
	Rebalance()
}

type subscription struct {
	b     *Broker
	topic string
	group string
	opts  brokers.SubscribeOptions
	h     brokers.Handler
	pc    pushConsumer
	life  *driverutil.Lifecycle
	stats brokers.Counters

	ctx    context.Context // handlers' context: cancelled on Close and Crash
	cancel context.CancelFunc

	crashed atomic.Bool
	endOnce sync.Once

	// inFlight counts running callbacks; once stopping is set no new
	// callback calls the handler, so Close can wait for zero.
	mu       sync.Mutex
	stopping bool
	inFlight int
	idle     *sync.Cond
}

// Subscribe implements brokers.Broker with an orderly clustering push
// consumer of group (a new group starts at the first offset).
func (b *Broker) Subscribe(ctx context.Context, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	if group == "" {
		group = DefaultGroup
	}
	if n, err := b.queues(ctx, topic); err != nil || n == 0 {
		return nil, fmt.Errorf("rocketmq: subscribe %s: no route for the topic (run Setup first): %v", topic, err)
	}
	if _, err := b.producer(); err != nil { // Reject needs it; fail now, not mid-stream
		return nil, err
	}
	s := &subscription{b: b, topic: topic, group: group, opts: opts.WithDefaults(), h: h, life: driverutil.NewLifecycle()}
	if s.opts.MaxBatch > maxBatch {
		return nil, fmt.Errorf("rocketmq: subscribe %s: MaxBatch %d exceeds the client's limit of %d messages per callback", topic, s.opts.MaxBatch, maxBatch)
	}
	s.idle = sync.NewCond(&s.mu)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	copts := []consumer.Option{
		consumer.WithNsResolver(b.resolver()),
		consumer.WithGroupName(group),
		consumer.WithInstance(b.uniqueName("consumer")),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumerOrder(true),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		// -1: unlimited local re-consumption, so a message in Retry never
		// moves to %RETRY%/%DLQ% without the handler saying Reject.
		consumer.WithMaxReconsumeTimes(-1),
		// The client hands an orderly callback up to this many messages of
		// one queue that it already pulled; it never waits to fill one.
		consumer.WithConsumeMessageBatchMaxSize(s.opts.MaxBatch),
		consumer.WithPullBatchSize(int32(min(s.opts.Prefetch, 1024))),
		consumer.WithPullThresholdForQueue(int64(max(s.opts.Prefetch, 64))),
		// Renew (and retry) the broker-side queue locks every 2s instead of
		// 20s: after a consumer dies, its queues move as soon as the
		// broker lets its locks expire (rocketmq.broker.rebalance.
		// lockMaxLiveTime, 60s by default, 6s on the local stack).
		consumer.WithRebalanceLockInterval(2 * time.Second),
	}
	if b.creds.AccessKey != "" {
		copts = append(copts, consumer.WithCredentials(b.creds))
	}
	pc, err := consumer.NewPushConsumer(copts...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: subscribe %s as %s: %w", topic, group, err)
	}
	if err := pc.Subscribe(topic, consumer.MessageSelector{}, s.consume); err != nil {
		return nil, fmt.Errorf("rocketmq: subscribe %s as %s: %w", topic, group, err)
	}
	s.pc = pc
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errors.New("rocketmq: subscribe: broker is closed")
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	if err := pc.Start(); err != nil {
		s.end(nil)
		<-s.life.Done()
		return nil, fmt.Errorf("rocketmq: start consumer of %s as %s: %w", topic, group, err)
	}
	go s.nudge()
	return s, nil
}

// nudge rebalances every second. The client rebalances at start and then
// every 20s; a consumer joining a group computes its share at start, but
// cannot lock those queues until their old owner (notified of the join)
// has let go a moment later, so without a nudge it idles for 20s. Each
// rebalance is one consumer-list query per topic.
func (s *subscription) nudge() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if s.enter() {
				s.pc.Rebalance()
				s.leave()
			}
		}
	}
}

func (s *subscription) Done() <-chan struct{} { return s.life.Done() }
func (s *subscription) Err() error            { return s.life.Err() }
func (s *subscription) Stats() brokers.Stats  { return s.stats.Stats() }

// Close implements brokers.Subscription.
func (s *subscription) Close() error {
	s.end(nil)
	return s.life.Wait()
}

// end stops the subscription once: no handler starts any more, running
// ones finish, then the consumer shuts down (unlocking its queues on the
// broker and persisting acked offsets).
func (s *subscription) end(cause error) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		s.cancel()
		go func() {
			s.mu.Lock()
			for s.inFlight > 0 {
				s.idle.Wait()
			}
			s.mu.Unlock()
			errs := []error{cause}
			if cause == nil {
				// The client commits an acked offset after the callback
				// returned; give it that moment before Shutdown persists.
				time.Sleep(200 * time.Millisecond)
			}
			if !driverutil.Bounded(20*time.Second, func() { _ = s.pc.Shutdown() }) {
				errs = append(errs, fmt.Errorf("rocketmq: consumer of %s (group %s) did not shut down within 20s", s.topic, s.group))
			}
			s.b.mu.Lock()
			delete(s.b.subs, s)
			s.b.mu.Unlock()
			s.life.Finish(errors.Join(errs...))
		}()
	})
}

func (s *subscription) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.inFlight++
	return true
}

func (s *subscription) leave() {
	s.mu.Lock()
	s.inFlight--
	if s.inFlight == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

// suspend asks the client to hand the same message(s) back after d. The
// time must be set on the orderly context: its default (-1) means no pause
// at all, and consumer.WithSuspendCurrentQueueTimeMillis does not apply
// to this path in this client version.
func suspend(ctx context.Context, d time.Duration) (consumer.ConsumeResult, error) {
	if oc, ok := primitive.GetOrderlyCtx(ctx); ok {
		oc.SuspendCurrentQueueTimeMillis = int(max(d, 10*time.Millisecond) / time.Millisecond)
	}
	return consumer.SuspendCurrentQueueAMoment, nil
}

// consume is the orderly callback: one batch of one queue (up to
// MaxBatch messages the client already pulled), one Handler call, the
// verdicts mapped onto one orderly result for the whole batch — the
// client acknowledges or suspends a batch as a unit:
//   - all Ack/Reject: rejects are sent to the DLQ topic, then
//     ConsumeSuccess;
//   - any Retry: SuspendCurrentQueueAMoment; the whole batch comes back
//     (ReconsumeTimes+1 for each), the acked deliveries before the Retry
//     included, and nothing is dead-lettered yet;
//   - any Crash: nothing is acked and the consumer shuts down.
func (s *subscription) consume(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	if !s.enter() {
		// Closing or crashed: leave everything unacked for the next owner.
		return suspend(ctx, time.Second)
	}
	defer s.leave()
	if len(msgs) == 0 {
		return consumer.ConsumeSuccess, nil
	}
	ds := make([]*brokers.Delivery, len(msgs))
	for i, m := range msgs {
		attempt := int(m.ReconsumeTimes) + 1
		ds[i] = &brokers.Delivery{
			Message:       message(m),
			Redelivered:   m.ReconsumeTimes > 0,
			DeliveryCount: attempt,
			Attempt:       attempt,
			TransportID:   transportID(m),
			Shard:         fmt.Sprintf("%s:%d", m.Queue.BrokerName, m.Queue.QueueId),
			BrokerTime:    time.UnixMilli(m.StoreTimestamp),
		}
		s.stats.Delivered()
	}
	vs := s.h(s.ctx, ds)
	if len(vs) != len(ds) {
		// Guessing which delivery a missing verdict belongs to could ack
		// something the caller never committed: ack nothing, fail.
		s.end(fmt.Errorf("rocketmq: %s: handler returned %d verdicts for a batch of %d deliveries (first %s): it must return one per delivery", ds[0].Shard, len(vs), len(ds), ds[0].TransportID))
		return suspend(ctx, time.Second)
	}
	retry := -1
	for i, v := range vs {
		switch v {
		case brokers.Ack, brokers.Reject:
		case brokers.Retry:
			if retry < 0 {
				retry = i
			}
		default: // Crash, or a verdict this driver does not know: ack nothing
			if s.crashed.CompareAndSwap(false, true) {
				s.stats.Crashed()
				s.end(brokers.ErrCrashed)
			}
			return suspend(ctx, time.Second)
		}
	}
	if retry >= 0 {
		// Dead-lettering the rejects now would copy them again when the
		// batch comes back: they are rejected (and sent) on the round
		// that succeeds.
		s.stats.Retried()
		return suspend(ctx, s.opts.Backoff(ds[retry].Attempt))
	}
	rejected := 0
	for i, v := range vs {
		if v != brokers.Reject {
			continue
		}
		if err := s.b.send(s.ctx, s.b.prod, s.topic+DLQSuffix, ds[i].Message, map[string]string{propSource: ds[i].TransportID}); err != nil {
			// Not dead-lettered, so not acked: the whole batch again (a
			// reject sent before this one may then reach the DLQ twice).
			slog.Warn("rocketmq: dead-letter send failed; the batch will be handed to the handler again", "topic", s.topic, "id", ds[i].ID, "err", err)
			return suspend(ctx, s.opts.Backoff(ds[i].Attempt))
		}
		rejected++
	}
	for range rejected {
		s.stats.DeadLettered()
	}
	for range len(vs) - rejected {
		s.stats.Acked()
	}
	return consumer.ConsumeSuccess, nil
}

// DeadLetters implements brokers.DeadLetterReader by consuming
// "<topic>-DLQ" from the first offset with a throw-away group.
func (b *Broker) DeadLetters(ctx context.Context, topic string, want int) ([]brokers.Message, error) {
	var (
		mu  sync.Mutex
		out []brokers.Message
		got = make(chan struct{}, 1)
	)
	sub, err := b.Subscribe(ctx, topic+DLQSuffix, fmt.Sprintf("inboxbench-dlq-reader-%d", time.Now().UnixNano()), brokers.SubscribeOptions{},
		brokers.PerDelivery(func(_ context.Context, d *brokers.Delivery) brokers.Verdict {
			mu.Lock()
			out = append(out, d.Message)
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
			return brokers.Ack
		}))
	if err != nil {
		return nil, fmt.Errorf("rocketmq: read dead letters of %s: %w", topic, err)
	}
	defer sub.Close()
	for {
		mu.Lock()
		n := len(out)
		mu.Unlock()
		if n >= want {
			break
		}
		select {
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return append([]brokers.Message(nil), out...), fmt.Errorf("rocketmq: read dead letters of %s: got %d of %d: %w", topic, n, want, ctx.Err())
		case <-got:
		case <-time.After(100 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]brokers.Message(nil), out...), nil
}
