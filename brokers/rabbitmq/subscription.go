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
	life  *driverutil.Lifecycle
	stats brokers.Counters

	ctx    context.Context // cancelled on Close, Crash or failure
	cancel context.CancelFunc

	crashed atomic.Bool
	endOnce sync.Once
	workers sync.WaitGroup
}

// shardConsumer is one shard queue's consumer: its own channel, so that
// basic.ack with multiple=true covers only this queue's deliveries (tags
// are per channel), and basic.qos applies per queue.
type shardConsumer struct {
	q      string
	ch     *amqp.Channel
	in     <-chan amqp.Delivery
	closed chan *amqp.Error // the channel's close reason, if the broker closed it
}

// Subscribe implements brokers.Broker: one connection per subscription (so
// Crash can drop exactly this consumer), one channel, consumer and
// goroutine per shard queue, basic.qos prefetch per channel. group is
// ignored (see the package doc).
func (b *Broker) Subscribe(ctx context.Context, topic, _ string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	n, err := b.shardCount(topic)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", topic, ctx.Err())
	}
	conn, err := Dial(b.cfg, "inboxbench-consumer-"+topic, dialTimeout)
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
	consumers := make([]shardConsumer, n)
	for i := range consumers {
		c := &consumers[i]
		c.q = queueName(topic, i)
		if ctx.Err() != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: %w", topic, ctx.Err()))
		}
		if c.ch, err = conn.Channel(); err != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: open channel for %s: %w", topic, c.q, err))
		}
		c.closed = c.ch.NotifyClose(make(chan *amqp.Error, 1))
		if err := c.ch.Qos(s.opts.Prefetch, 0, false); err != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: set prefetch %d on %s: %w", topic, s.opts.Prefetch, c.q, err))
		}
		tag := fmt.Sprintf("inboxbench-%s-%d", c.q, time.Now().UnixNano())
		// Not ctx: amqp091 cancels the consumer when that context ends, and
		// ctx only bounds start-up.
		if c.in, err = c.ch.ConsumeWithContext(context.Background(), c.q, tag, false, false, false, false, nil); err != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: consume %s: %w", topic, c.q, err))
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
	for _, c := range consumers {
		// amqp091 hands deliveries over an unbuffered channel, so a
		// non-blocking receive finds nothing whenever its buffering
		// goroutine has not looped back yet. The pump keeps what the
		// broker already sent (at most Prefetch) in a buffered channel,
		// filled while the handler runs, which is what a batch drains.
		buf := make(chan amqp.Delivery, s.opts.Prefetch)
		go pump(s.ctx, c.in, buf)
		s.workers.Add(1)
		go s.run(c, buf)
	}
	return s, nil
}

// pump forwards deliveries until in closes (channel or connection closed)
// or ctx ends, then closes out.
func pump(ctx context.Context, in <-chan amqp.Delivery, out chan<- amqp.Delivery) {
	defer close(out)
	for d := range in {
		select {
		case out <- d:
		case <-ctx.Done():
			return // unacked: returned to the queue when the connection closes
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

// run handles one queue's deliveries in order, in batches: it waits for
// one delivery, then takes whatever else is already buffered, up to
// MaxBatch.
func (s *subscription) run(c shardConsumer, buf <-chan amqp.Delivery) {
	defer s.workers.Done()
	batch := make([]amqp.Delivery, 0, s.opts.MaxBatch)
	for {
		batch = batch[:0]
		open := true
		select {
		case <-s.ctx.Done():
			return
		case d, ok := <-buf:
			if !ok {
				s.consumerEnded(c)
				return
			}
			batch = append(batch, d)
		}
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case d, ok := <-buf:
				if !ok {
					open = false // handle what we have; the next receive reports it
					break drain
				}
				batch = append(batch, d)
			default:
				break drain
			}
		}
		ds := make([]*brokers.Delivery, len(batch))
		tags := make([]uint64, len(batch))
		for i := range batch {
			ds[i] = delivery(c.q, &batch[i])
			tags[i] = batch[i].DeliveryTag
		}
		next := 0 // HandleBatch settles consecutive prefixes of the batch
		settle := func(ds []*brokers.Delivery, vs []brokers.Verdict) error {
			mine := tags[next : next+len(ds)]
			next += len(ds)
			var lastAck uint64
			// Rejects first, one by one: the multiple ack below must not
			// cover a delivery that is to be dead-lettered.
			for i, v := range vs {
				if v == brokers.Reject {
					if err := c.ch.Nack(mine[i], false, false); err != nil {
						return fmt.Errorf("reject delivery %s of %s: %w", ds[i].TransportID, ds[i].ID, err)
					}
				} else {
					lastAck = mine[i]
				}
			}
			// One frame acks the whole prefix: every earlier tag of this
			// channel is already settled, every later one is not covered.
			if lastAck != 0 {
				if err := c.ch.Ack(lastAck, true); err != nil {
					return fmt.Errorf("ack deliveries of %s up to tag %d: %w", c.q, lastAck, err)
				}
			}
			return nil
		}
		switch out, err := driverutil.HandleBatch(s.ctx, s.h, ds, s.opts, &s.stats, settle); out {
		case driverutil.Settled:
		case driverutil.Unfinished:
			return // left unacked: returned to the queue when the connection closes
		case driverutil.Crashed:
			if s.crashed.CompareAndSwap(false, true) {
				s.stats.Crashed()
				s.end(brokers.ErrCrashed)
			}
			return
		default:
			if !s.crashed.Load() {
				s.end(fmt.Errorf("rabbitmq: %s: %w", c.q, err))
			}
			return
		}
		if !open {
			s.consumerEnded(c)
			return
		}
	}
}

// consumerEnded ends the subscription when a queue's delivery channel
// closed by itself (not by Close or Crash).
func (s *subscription) consumerEnded(c shardConsumer) {
	if s.ctx.Err() != nil {
		return
	}
	var reason error = errors.New("consumer cancelled by the broker (queue deleted?)")
	select {
	case e, ok := <-c.closed:
		if ok && e != nil {
			reason = e
		}
	default:
	}
	s.end(fmt.Errorf("rabbitmq: consumer of %s ended: %w", c.q, reason))
}

// delivery converts an AMQP delivery of queue q.
func delivery(q string, d *amqp.Delivery) *brokers.Delivery {
	del := &brokers.Delivery{
		Message:       message(d),
		Redelivered:   d.Redelivered,
		DeliveryCount: deliveryCount(d),
		TransportID:   q + "#" + strconv.FormatUint(d.DeliveryTag, 10),
		Shard:         q,
	}
	if ns, err := strconv.ParseInt(fmt.Sprint(d.Headers[HeaderSent]), 10, 64); err == nil {
		del.BrokerTime = time.Unix(0, ns)
	}
	return del
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
