package rocketmq

import (
	"context"
	"errors"
	"fmt"
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

// pushConsumer is the part of the client's push consumer the driver uses.
type pushConsumer interface {
	Start() error
	Shutdown() error
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
		consumer.WithConsumeMessageBatchMaxSize(1),
		consumer.WithPullBatchSize(int32(min(s.opts.Prefetch, 1024))),
		consumer.WithPullThresholdForQueue(int64(max(s.opts.Prefetch, 64))),
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
	return s, nil
}

func (s *subscription) Done() <-chan struct{} { return s.life.Done() }
func (s *subscription) Err() error            { return s.life.Err() }
func (s *subscription) Stats() brokers.Stats  { return s.stats.Stats() }

// Close implements brokers.Subscription.
func (s *subscription) Close() error {
	s.end(nil)
	<-s.life.Done()
	if err := s.life.Err(); err != nil && !errors.Is(err, brokers.ErrCrashed) {
		return err
	}
	return nil
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

// consume is the orderly callback: one message (batch size 1), one
// handler call, the verdict mapped onto the orderly results.
func (s *subscription) consume(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	if !s.enter() {
		// Closing or crashed: leave everything unacked for the next owner.
		return suspend(ctx, time.Second)
	}
	defer s.leave()
	for i, m := range msgs {
		attempt := int(m.ReconsumeTimes) + 1
		d := &brokers.Delivery{
			Message:       message(m),
			Redelivered:   m.ReconsumeTimes > 0,
			DeliveryCount: attempt,
			Attempt:       attempt,
			TransportID:   transportID(m),
			Shard:         fmt.Sprintf("%s:%d", m.Queue.BrokerName, m.Queue.QueueId),
			BrokerTime:    time.UnixMilli(m.StoreTimestamp),
		}
		s.stats.Delivered()
		switch v := s.h(s.ctx, d); v {
		case brokers.Ack:
			s.stats.Acked()
		case brokers.Retry:
			if i > 0 {
				// Cannot happen with batch size 1; a partial batch cannot be
				// acked in orderly mode, so the whole batch comes back.
				return suspend(ctx, s.opts.Backoff(attempt))
			}
			s.stats.Retried()
			return suspend(ctx, s.opts.Backoff(attempt))
		case brokers.Reject:
			err := s.b.send(s.ctx, s.b.prod, s.topic+DLQSuffix, d.Message, map[string]string{propSource: d.TransportID})
			if err != nil {
				// Not dead-lettered, so not acked: try the whole thing again.
				return suspend(ctx, s.opts.Backoff(attempt))
			}
			s.stats.DeadLettered()
		default: // Crash, or a verdict this driver does not know: ack nothing
			if s.crashed.CompareAndSwap(false, true) {
				s.stats.Crashed()
				s.end(brokers.ErrCrashed)
			}
			return suspend(ctx, time.Second)
		}
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
		func(_ context.Context, d *brokers.Delivery) brokers.Verdict {
			mu.Lock()
			out = append(out, d.Message)
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
			return brokers.Ack
		})
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
