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

// publisher is one confirm-mode channel, used by one Publish call at a time.
type publisher struct {
	b    *Broker
	mu   sync.Mutex
	conn *amqp.Connection // ch's connection
	ch   *amqp.Channel
	ret  chan amqp.Return // basic.return of mandatory messages nobody could route
}

// channel returns the publisher's confirm channel, reopening it after a
// channel or connection error.
func (p *publisher) channel() (*amqp.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	conn, err := p.b.connection()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open publish channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("rabbitmq: enable publisher confirms: %w", err)
	}
	// Buffered, and drained while waiting for confirms: the connection's
	// reader delivers a return before the matching ack, so once the ack
	// is seen the return is already in this channel.
	p.ret = ch.NotifyReturn(make(chan amqp.Return, 256))
	p.ch, p.conn = ch, conn
	return ch, nil
}

func (p *publisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
}

// abandon drops the channel without waiting for the broker: a channel
// with unconfirmed messages must not carry the next batch (late confirms
// would mix), and a close handshake can hang on a blocked connection.
func (p *publisher) abandon() {
	if ch := p.ch; ch != nil {
		go ch.Close() //nolint:errcheck // ends when the connection does at the latest
		p.ch = nil
	}
}

// publish sends msgs on the publisher's channel and waits for their
// confirms, at most the broker's confirm timeout. At the deadline it closes
// the publishing connection (with a deadline of its own): that ends a send
// stuck in a socket write, which is where a large batch waits while an
// alarm blocks the connection, and every confirm wait with it.
func (p *publisher) publish(ctx context.Context, topic string, shards int, msgs []brokers.Message, errs []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, err := p.channel()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return
	}
	conn := p.conn
	bctx, cancel := context.WithTimeout(ctx, p.b.confirmTimeout)
	defer cancel()
	var timedOut atomic.Pointer[string] // the block reason at the deadline ("" if not blocked)
	expire := func() {
		if ctx.Err() != nil {
			return // the caller gave up: not a timeout
		}
		reason := p.b.blockedReason(conn)
		timedOut.Store(&reason)
		_ = conn.CloseDeadline(time.Now().Add(time.Second))
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(bctx, func() {
		defer close(fired)
		expire()
	})

	confirms, sent := p.send(bctx, ch, topic, shards, msgs, errs)
	returned := p.await(bctx, topic, msgs, confirms, sent, errs)
	if !stop() {
		<-fired // the deadline (or the caller) ended the batch
	} else if bctx.Err() != nil {
		// The deadline passed and await saw it before the callback
		// started (stop cancelled it): a timeout all the same.
		expire()
	}
	if r := timedOut.Load(); r != nil {
		for i, dc := range confirms {
			if dc == nil || !dc.Acked() {
				errs[i] = p.timeoutError(msgs[i].ID, topic, *r)
			}
		}
	}
	for i, why := range returned {
		errs[i] = fmt.Errorf("rabbitmq: publish %s to %s: unroutable, returned by the broker: %s", msgs[i].ID, topic, why)
	}
	if bctx.Err() != nil {
		p.abandon()
	}
	var ae *amqp.Error
	for _, e := range errs {
		if errors.As(e, &ae) {
			p.ch = nil
			break
		}
	}
}

// send publishes msgs in order; a failure fails the rest of the batch.
// It returns each message's confirm, and the indexes of the messages by
// message id and queue, in publish order, for await to match basic.returns
// to them: the channel carries one batch at a time, and a return carries
// the message's properties and routing key but no delivery tag. (A header
// of its own would match them too, but each header costs the broker about
// 3% of its publish rate.)
func (p *publisher) send(ctx context.Context, ch *amqp.Channel, topic string, shards int, msgs []brokers.Message, errs []error) ([]*amqp.DeferredConfirmation, map[returnKey][]int) {
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	sent := make(map[returnKey][]int, len(msgs))
	for i, m := range msgs {
		q := queueName(topic, driverutil.Shard(m.Key, shards))
		h := amqp.Table{HeaderKey: m.Key, HeaderSent: strconv.FormatInt(time.Now().UnixNano(), 10)}
		for k, v := range m.Headers {
			h[k] = v
		}
		var err error
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  ContentType,
			MessageId:    m.ID,
			Headers:      h,
			Body:         m.Body,
		})
		if err != nil {
			errs[i] = fmt.Errorf("rabbitmq: publish %s to %s: %w", m.ID, q, err)
			// The channel may be gone: fail the rest rather than publish on.
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = fmt.Errorf("rabbitmq: publish %s to %s: not sent after an earlier failure: %w", msgs[j].ID, topic, err)
			}
			break
		}
		k := returnKey{m.ID, q}
		sent[k] = append(sent[k], i)
	}
	return confirms, sent
}

// returnKey is what a basic.return tells of its message: the message id
// and the queue it was routed to. Messages with equal keys are returned in
// the order they were published.
type returnKey struct{ id, queue string }

// await waits for each confirm (or ctx), collecting basic.returns of
// unroutable messages by index.
func (p *publisher) await(ctx context.Context, topic string, msgs []brokers.Message, confirms []*amqp.DeferredConfirmation, sent map[returnKey][]int, errs []error) map[int]string {
	returned := map[int]string{}
	note := func(r amqp.Return) {
		k := returnKey{r.MessageId, r.RoutingKey}
		if idx := sent[k]; len(idx) > 0 {
			returned[idx[0]] = fmt.Sprintf("%d %s (queue %s missing?)", r.ReplyCode, r.ReplyText, r.RoutingKey)
			sent[k] = idx[1:]
		}
	}
	ret := p.ret
	for i, dc := range confirms {
		if dc == nil {
			continue
		}
		for waiting := true; waiting; {
			select {
			case <-dc.Done():
				waiting = false
			case r, ok := <-ret:
				if !ok {
					ret = nil // channel gone; dc.Done follows
					continue
				}
				note(r)
			case <-ctx.Done():
				errs[i] = fmt.Errorf("rabbitmq: publish %s to %s: no confirm: %w", msgs[i].ID, topic, ctx.Err())
				waiting = false
			}
		}
		if errs[i] == nil && !dc.Acked() {
			errs[i] = fmt.Errorf("rabbitmq: publish %s to %s: broker nacked the message (or the channel closed before confirming)", msgs[i].ID, topic)
		}
	}
	for ret != nil { // drain what arrived with the last acks
		select {
		case r, ok := <-ret:
			if !ok {
				return returned
			}
			note(r)
		default:
			return returned
		}
	}
	return returned
}

// timeoutError explains a batch that was not confirmed in time, naming the
// resource alarm when the broker had blocked the connection.
func (p *publisher) timeoutError(id, topic, blocked string) error {
	if blocked != "" {
		return fmt.Errorf("rabbitmq: publish %s to %s: %w: %s (memory or disk alarm), no confirm within %s: the broker accepts no message while the alarm lasts; free memory or disk on the broker, or raise vm_memory_high_watermark / disk_free_limit (`rabbitmq-diagnostics alarms` lists them)",
			id, topic, ErrBlocked, blocked, p.b.confirmTimeout)
	}
	return fmt.Errorf("rabbitmq: publish %s to %s: no publisher confirm within %s (option %s): the broker is overloaded or unreachable", id, topic, p.b.confirmTimeout, OptConfirmTimeout)
}
