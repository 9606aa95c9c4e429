package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

type subscription struct {
	driverutil.Sub
	b     *Broker
	topic string
	n     int // shard queues

	ctx    context.Context // cancelled on Close, Crash or failure
	cancel context.CancelFunc

	mu   sync.Mutex
	sess *session // the current connection's consumers

	endOnce  sync.Once
	loopDone chan struct{} // the session loop returned: no worker runs
}

// session is one connection of a subscription with a consumer per shard
// queue. It ends when the connection is lost (or a consumer is cancelled
// by the broker), and the subscription then opens another, to any node
// that answers.
type session struct {
	conn      *amqp.Connection
	consumers []shardConsumer
	ctx       context.Context // cancelled when the session ends
	cancel    context.CancelFunc
	workers   sync.WaitGroup

	lostOnce sync.Once
	lost     error // why it ended early (nil: the subscription ended it)
	fatal    error // an error that ends the subscription
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

// reconnectFor bounds how long a subscription whose connection was lost
// keeps trying the nodes before it ends with the error.
const reconnectFor = 2 * time.Minute

// Subscribe implements brokers.Broker: one connection per subscription (so
// Crash can drop exactly this consumer), one channel, consumer and
// goroutine per shard queue, basic.qos prefetch per channel. group is
// ignored (see the package doc). A lost connection does not end the
// subscription: once the running Handler calls returned (their acks fail
// with the connection, so what they finished is redelivered), it connects
// to a node that answers and consumes again, single-active-consumer
// deciding when its consumers get deliveries.
func (b *Broker) Subscribe(ctx context.Context, topic, _ string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	n, err := b.shardCount(topic)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", topic, ctx.Err())
	}
	s := &subscription{b: b, topic: topic, n: n, loopDone: make(chan struct{})}
	s.Init(opts, h, s.end)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	sess, err := s.connect(ctx)
	if err != nil {
		s.cancel()
		return nil, err
	}
	if !b.subs.Add(s) {
		s.cancel()
		_ = sess.conn.Close()
		return nil, errors.New("rabbitmq: subscribe: broker is closed")
	}
	go s.loop(sess)
	return s, nil
}

// connect opens a connection to a node and a consumer per shard queue.
func (s *subscription) connect(ctx context.Context) (*session, error) {
	topic := s.topic
	conn, err := s.b.dial(ctx, "inboxbench-consumer-"+topic)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: subscribe %s: connect: %w", topic, err)
	}
	sess := &session{conn: conn, consumers: make([]shardConsumer, s.n)}
	fail := func(err error) (*session, error) {
		_ = conn.Close()
		return nil, err
	}
	for i := range sess.consumers {
		c := &sess.consumers[i]
		c.q = queueName(topic, i)
		if ctx.Err() != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: %w", topic, ctx.Err()))
		}
		if c.ch, err = conn.Channel(); err != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: open channel for %s: %w", topic, c.q, err))
		}
		c.closed = c.ch.NotifyClose(make(chan *amqp.Error, 1))
		if err := c.ch.Qos(s.Opts.Prefetch, 0, false); err != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: set prefetch %d on %s: %w", topic, s.Opts.Prefetch, c.q, err))
		}
		tag := fmt.Sprintf("inboxbench-%s-%d", c.q, time.Now().UnixNano())
		// Not ctx: amqp091 cancels the consumer when that context ends, and
		// ctx only bounds start-up.
		if c.in, err = c.ch.ConsumeWithContext(context.Background(), c.q, tag, false, false, false, false, nil); err != nil {
			return fail(fmt.Errorf("rabbitmq: subscribe %s: consume %s: %w", topic, c.q, err))
		}
	}
	return sess, nil
}

// gone reports whether a consume failed because the queue does not exist
// (deleted), as opposed to one whose node is down or unreachable, which
// comes back.
func gone(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound && !strings.Contains(ae.Reason, "down or inaccessible")
}

// loop runs sessions until the subscription ends: when one is lost it
// waits for its workers, then connects again (to any node), for up to
// reconnectFor.
func (s *subscription) loop(sess *session) {
	defer close(s.loopDone)
	for {
		s.serve(sess)
		if s.ctx.Err() != nil {
			return
		}
		if sess.fatal != nil {
			s.end(sess.fatal)
			return
		}
		lost := sess.lost
		since := time.Now()
		backoff := 100 * time.Millisecond
		for {
			if !ctxtime.Sleep(s.ctx, backoff) {
				return
			}
			next, err := s.connect(s.ctx)
			if err == nil {
				sess = next
				s.b.reconnects.Add(1)
				break
			}
			if s.ctx.Err() != nil {
				return
			}
			if gone(err) || time.Since(since) > reconnectFor {
				s.end(fmt.Errorf("rabbitmq: consumer of %s: %v; connecting again failed: %w", s.topic, lost, err))
				return
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// serve runs one session's workers until they all returned: the
// subscription ended, or the session was lost.
func (s *subscription) serve(sess *session) {
	sess.ctx, sess.cancel = context.WithCancel(s.ctx)
	defer sess.cancel()
	s.mu.Lock()
	s.sess = sess
	crashed := s.Crashed()
	s.mu.Unlock()
	if crashed {
		_ = sess.conn.Close()
		return
	}
	closed := sess.conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		select {
		case e, ok := <-closed:
			if !ok || e == nil {
				e = amqp.ErrClosed
			}
			sess.end(fmt.Errorf("connection lost: %w", e), nil)
		case <-sess.ctx.Done():
		}
	}()
	for _, c := range sess.consumers {
		// amqp091 hands deliveries over an unbuffered channel, so a
		// non-blocking receive finds nothing whenever its buffering
		// goroutine has not looped back yet. The pump keeps what the
		// broker already sent (at most Prefetch) in a buffered channel,
		// filled while the handler runs, which is what a batch drains.
		buf := make(chan amqp.Delivery, s.Opts.Prefetch)
		sess.workers.Add(2)
		go s.pump(sess, c.in, buf)
		go s.run(sess, c, buf)
	}
	sess.workers.Wait()
	// Whatever ended it, the connection goes: its unacked deliveries
	// return to their queues before this subscription consumes again.
	if !sess.conn.IsClosed() {
		_ = sess.conn.Close()
	}
}

// end ends the session once: lost (the subscription connects again) or
// fatal (the subscription ends with it).
func (sess *session) end(lost, fatal error) {
	sess.lostOnce.Do(func() {
		sess.lost, sess.fatal = lost, fatal
		sess.cancel()
	})
}

// pump forwards deliveries, counting them received, until in closes
// (channel or connection closed) or the session ends, then closes out.
// With SettleOnReceipt (a negative control) it acknowledges each one
// first; one whose ack fails (the channel closed) is not forwarded.
func (s *subscription) pump(sess *session, in <-chan amqp.Delivery, out chan<- amqp.Delivery) {
	defer sess.workers.Done()
	defer close(out)
	for {
		var d amqp.Delivery
		select {
		case next, ok := <-in:
			if !ok {
				return
			}
			d = next
		case <-sess.ctx.Done():
			return // unacked: returned to the queue when the connection closes
		}
		if s.Opts.SettleOnReceipt && d.Ack(false) != nil {
			return
		}
		s.Received(1)
		select {
		case out <- d:
		case <-sess.ctx.Done():
			return
		}
	}
}

// end stops the subscription once. A clean end stops the workers, lets
// running handlers finish and ack, then closes the connection, which
// returns the remaining prefetched deliveries to the front of their
// queues. A crash closes the connection first, so nothing more is acked.
func (s *subscription) end(cause error) {
	s.endOnce.Do(func() {
		crashed := errors.Is(cause, brokers.ErrCrashed)
		s.mu.Lock()
		sess := s.sess
		s.mu.Unlock()
		s.cancel()
		if crashed && sess != nil {
			_ = sess.conn.Close()
		}
		// No basic.cancel on a clean end: on RabbitMQ 3.10 quorum queues,
		// deliveries in flight to a cancelled consumer are returned to the
		// back of the queue, breaking per-key order, while the ones returned
		// by closing the channel go back to the front, in order.
		go func() {
			<-s.loopDone
			errs := []error{cause}
			if sess != nil && !crashed && !sess.conn.IsClosed() {
				if err := sess.conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) && cause == nil {
					errs = append(errs, fmt.Errorf("rabbitmq: close consumer of %s: %w", s.topic, err))
				}
			}
			s.b.subs.Remove(s)
			s.Finish(errors.Join(errs...))
		}()
	})
}

// run handles one queue's deliveries in order, in batches: it waits for
// one delivery, then takes whatever else is already buffered, up to
// MaxBatch.
func (s *subscription) run(sess *session, c shardConsumer, buf <-chan amqp.Delivery) {
	defer sess.workers.Done()
	batch := make([]amqp.Delivery, 0, s.Opts.MaxBatch)
	for {
		batch = batch[:0]
		open := true
		select {
		case <-sess.ctx.Done():
			return
		case d, ok := <-buf:
			if !ok {
				s.consumerEnded(sess, c)
				return
			}
			batch = append(batch, d)
		}
	drain:
		for len(batch) < s.Opts.MaxBatch {
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
			if s.Opts.SettleOnReceipt {
				return nil // acked on receipt: a second ack or a nack would close the channel
			}
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
		fail := func(err error) {
			switch {
			case s.Crashed():
			case sess.conn.IsClosed():
				// The ack went down with the connection: what the Handler
				// finished is redelivered, and the inbox knows it.
				sess.end(fmt.Errorf("%s: %w", c.q, err), nil)
			default:
				sess.end(nil, fmt.Errorf("rabbitmq: %s: %w", c.q, err))
			}
		}
		if !s.Handle(sess.ctx, ds, settle, fail) {
			return // unfinished: left unacked, returned to the queue when the connection closes
		}
		if !open {
			s.consumerEnded(sess, c)
			return
		}
	}
}

// consumerEnded ends the session when a queue's delivery channel closed
// by itself (not by Close or Crash): with the connection, or by a
// basic.cancel (a classic queue whose node went down, or a deleted
// queue: consuming again tells which), the subscription connects again;
// a channel the broker closed with an error ends the subscription.
func (s *subscription) consumerEnded(sess *session, c shardConsumer) {
	if sess.ctx.Err() != nil {
		return
	}
	var closed *amqp.Error
	select {
	case e, ok := <-c.closed:
		if ok && e != nil {
			closed = e
		}
	default:
	}
	switch {
	case sess.conn.IsClosed():
		sess.end(fmt.Errorf("consumer of %s: connection lost", c.q), nil)
	case closed != nil:
		sess.end(nil, fmt.Errorf("rabbitmq: consumer of %s ended: %w", c.q, closed))
	default:
		sess.end(fmt.Errorf("consumer of %s cancelled by the broker (its node down, or the queue deleted)", c.q), nil)
	}
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
