package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// publisher is one confirm-mode channel, used by one Publish call at a time.
type publisher struct {
	b   *Broker
	mu  sync.Mutex
	ch  *amqp.Channel
	ret chan amqp.Return // basic.return of mandatory messages nobody could route
	seq uint64
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
	p.ch = ch
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
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	seqs := make(map[string]int, len(msgs))
	for i, m := range msgs {
		q := queueName(topic, driverutil.Shard(m.Key, shards))
		p.seq++
		seq := strconv.FormatUint(p.seq, 10)
		h := amqp.Table{headerKey: m.Key, headerSent: strconv.FormatInt(time.Now().UnixNano(), 10), headerSeq: seq}
		for k, v := range m.Headers {
			h[k] = v
		}
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/cloudevents+json",
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
		seqs[seq] = i
	}
	returned := map[int]string{}
	note := func(r amqp.Return) {
		if s, _ := r.Headers[headerSeq].(string); s != "" {
			if i, ok := seqs[s]; ok {
				returned[i] = fmt.Sprintf("%d %s (queue %s missing?)", r.ReplyCode, r.ReplyText, r.RoutingKey)
			}
		}
	}
	drain := func() {
		for {
			select {
			case r, ok := <-p.ret:
				if !ok {
					return
				}
				note(r)
			default:
				return
			}
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
		if errs[i] != nil {
			continue
		}
		if !dc.Acked() {
			errs[i] = fmt.Errorf("rabbitmq: publish %s to %s: broker nacked the message (or the channel closed before confirming)", msgs[i].ID, topic)
		}
	}
	drain()
	for i, why := range returned {
		errs[i] = fmt.Errorf("rabbitmq: publish %s to %s: unroutable, returned by the broker: %s", msgs[i].ID, topic, why)
	}
	if ctx.Err() != nil && p.ch != nil {
		// Unconfirmed messages may still be confirmed later on this channel;
		// start the next batch on a fresh one so confirms cannot mix.
		_ = p.ch.Close()
		p.ch = nil
	}
	var ae *amqp.Error
	for _, e := range errs {
		if errors.As(e, &ae) {
			p.ch = nil
			break
		}
	}
}
