package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

type subscription struct {
	b     *Broker
	topic string
	opts  brokers.SubscribeOptions
	h     brokers.Handler
	conn  *amqp.Connection
	ch    *amqp.Channel
	life  *driverutil.Lifecycle
	stats brokers.Counters

	ctx    context.Context // cancelled on Close, Crash or failure
	cancel context.CancelFunc

	crashed atomic.Bool
	endOnce sync.Once
	workers sync.WaitGroup
	tags    []string
}

// Subscribe implements brokers.Broker: one connection and channel per
// subscription (so Crash can drop exactly this consumer), basic.qos
// prefetch per consumer, one consumer and one goroutine per shard queue.
// group is ignored (see the package doc).
func (b *Broker) Subscribe(ctx context.Context, topic, _ string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	n, err := b.shardCount(topic)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", topic, ctx.Err())
	}
	conn, err := dial(b.url, "inboxbench-consumer-"+topic)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: subscribe %s: connect: %w", topic, err)
	}
	s := &subscription{b: b, topic: topic, opts: opts.WithDefaults(), h: h, conn: conn, life: driverutil.NewLifecycle()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	fail := func(err error) (brokers.Subscription, error) {
		s.cancel()
		_ = conn.Close()
		return nil, err
	}
	if s.ch, err = conn.Channel(); err != nil {
		return fail(fmt.Errorf("rabbitmq: subscribe %s: open channel: %w", topic, err))
	}
	if err := s.ch.Qos(s.opts.Prefetch, 0, false); err != nil {
		return fail(fmt.Errorf("rabbitmq: subscribe %s: set prefetch %d: %w", topic, s.opts.Prefetch, err))
	}
	queues := make([]<-chan amqp.Delivery, n)
	for i := 0; i < n; i++ {
		q := queueName(topic, i)
		tag := fmt.Sprintf("inboxbench-%s-%d", q, time.Now().UnixNano())
		// Not ctx: amqp091 cancels the consumer when that context ends, and
		// ctx only bounds start-up.
		if queues[i], err = s.ch.ConsumeWithContext(context.Background(), q, tag, false, false, false, false, nil); err != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: consume %s: %w", topic, q, err))
		}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fail(errors.New("rabbitmq: subscribe: broker is closed"))
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()

	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		select {
		case e, ok := <-closed:
			if ok && e != nil && !s.crashed.Load() && s.ctx.Err() == nil {
				s.end(fmt.Errorf("rabbitmq: consumer connection of %s lost: %w", topic, e))
			}
		case <-s.ctx.Done():
		}
	}()
	for i, dc := range queues {
		s.workers.Add(1)
		go s.run(queueName(topic, i), dc)
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

// end stops the subscription once. A clean end stops the workers, lets
// running handlers finish and ack, then closes the connection, which
// returns the remaining prefetched deliveries to the front of their queues. A crash
// closes the connection first, so nothing more is acked.
func (s *subscription) end(cause error) {
	s.endOnce.Do(func() {
		crashed := errors.Is(cause, brokers.ErrCrashed)
		s.cancel()
		if crashed {
			_ = s.conn.Close()
		}
		// No basic.cancel on a clean end: on RabbitMQ 3.10 quorum queues,
		// deliveries in flight to a cancelled consumer are returned to the
		// back of the queue, breaking per-key order, while the ones returned
		// by closing the channel go back to the front, in order.
		go func() {
			s.workers.Wait()
			errs := []error{cause}
			if !crashed && !s.conn.IsClosed() {
				if err := s.conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) && cause == nil {
					errs = append(errs, fmt.Errorf("rabbitmq: close consumer of %s: %w", s.topic, err))
				}
			}
			s.b.mu.Lock()
			delete(s.b.subs, s)
			s.b.mu.Unlock()
			s.life.Finish(errors.Join(errs...))
		}()
	})
}

// run handles one queue's deliveries in order.
func (s *subscription) run(q string, deliveries <-chan amqp.Delivery) {
	defer s.workers.Done()
	for {
		var d amqp.Delivery
		var ok bool
		select {
		case <-s.ctx.Done():
			return
		case d, ok = <-deliveries:
			if !ok {
				if s.ctx.Err() == nil {
					s.end(fmt.Errorf("rabbitmq: consumer of %s was cancelled by the broker (queue deleted?)", q))
				}
				return
			}
		}
		del := &brokers.Delivery{
			Message:     message(&d),
			Redelivered: d.Redelivered,
			TransportID: q + "#" + strconv.FormatUint(d.DeliveryTag, 10),
			Shard:       q,
		}
		del.DeliveryCount = deliveryCount(&d)
		if ns, err := strconv.ParseInt(fmt.Sprint(d.Headers[headerSent]), 10, 64); err == nil {
			del.BrokerTime = time.Unix(0, ns)
		}
		v, finished := driverutil.Handle(s.ctx, s.h, del, s.opts, &s.stats)
		if !finished {
			return // left unacked: returned to the queue when the channel closes
		}
		var err error
		switch v {
		case brokers.Ack:
			if err = d.Ack(false); err == nil {
				s.stats.Acked()
			}
		case brokers.Reject:
			if err = d.Nack(false, false); err == nil {
				s.stats.DeadLettered()
			}
		default: // Crash, or a verdict this driver does not know: ack nothing more
			if s.crashed.CompareAndSwap(false, true) {
				s.stats.Crashed()
				s.end(brokers.ErrCrashed)
			}
			return
		}
		if err != nil {
			if !s.crashed.Load() {
				s.end(fmt.Errorf("rabbitmq: %s delivery %s of %s: %w", v, del.TransportID, del.ID, err))
			}
			return
		}
	}
}

// deliveryCount is 1 + the quorum queue's x-delivery-count (the number of
// earlier delivery attempts), 1 on a first delivery, 0 if unknown.
func deliveryCount(d *amqp.Delivery) int {
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		return int(n) + 1
	case int32:
		return int(n) + 1
	case int:
		return n + 1
	case nil:
		if !d.Redelivered {
			return 1
		}
	}
	return 0
}
