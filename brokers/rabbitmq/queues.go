package rabbitmq

// Reading a topic's dead letters and deleting its queues.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
)

// DeadLetters implements brokers.DeadLetterReader with basic.get on
// "<topic>.dlq"; what it returns is acked, i.e. removed from the queue.
func (b *Broker) DeadLetters(ctx context.Context, topic string, want int) ([]brokers.Message, error) {
	ch, err := b.channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []brokers.Message
	for len(out) < want {
		d, ok, err := ch.Get(topic+DLQSuffix, false)
		if err != nil {
			return out, fmt.Errorf("rabbitmq: read %s%s: %w", topic, DLQSuffix, err)
		}
		if !ok {
			select {
			case <-ctx.Done():
				return out, fmt.Errorf("rabbitmq: read %s%s: got %d of %d: %w", topic, DLQSuffix, len(out), want, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		out = append(out, message(&d))
		if err := d.Ack(false); err != nil {
			return out, fmt.Errorf("rabbitmq: ack dead letter in %s%s: %w", topic, DLQSuffix, err)
		}
	}
	return out, nil
}

// message rebuilds the published Message from a delivery.
func message(d *amqp.Delivery) brokers.Message {
	m := brokers.Message{ID: d.MessageId, Body: d.Body}
	for k, v := range d.Headers {
		switch {
		case k == HeaderKey:
			m.Key, _ = v.(string)
		case strings.HasPrefix(k, "ib-") || strings.HasPrefix(k, "x-"):
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			if s, ok := v.(string); ok {
				m.Headers[k] = s
			} else {
				m.Headers[k] = fmt.Sprint(v)
			}
		}
	}
	return m
}

// DeleteTopic implements brokers.TopicDeleter: it deletes the shard
// queues and the DLQ.
func (b *Broker) DeleteTopic(ctx context.Context, topic string) error {
	n, err := b.shardCount(topic)
	if err != nil {
		return nil // no queues: nothing to delete
	}
	b.mu.Lock()
	delete(b.shards, topic)
	b.mu.Unlock()
	b.dropPublishers(topic)
	names := []string{topic + DLQSuffix}
	for i := 0; i < n; i++ {
		names = append(names, queueName(topic, i))
	}
	for _, q := range names {
		if err := b.deleteQueue(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// deleteQueue deletes one queue, retrying a few times on a server-side
// failure: RabbitMQ before 4.0 (Ra before 2.16) can crash its quorum-queue
// log writer when a queue just written to heavily is deleted (the queue's
// directory goes while its log is flushed: rabbitmq/ra#484); the delete
// then fails with 541 INTERNAL_ERROR while the queues restart, and
// succeeds once they have.
func (b *Broker) deleteQueue(ctx context.Context, q string) error {
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("rabbitmq: delete %s: %w (last: %v)", q, ctx.Err(), last)
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
		ch, err := b.channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDelete(q, false, false, false)
		_ = ch.Close()
		var ae *amqp.Error
		if err == nil || !errors.As(err, &ae) || ae.Code != amqp.InternalError {
			if err != nil {
				return fmt.Errorf("rabbitmq: delete %s: %w", q, err)
			}
			return nil
		}
		last = err
	}
	return fmt.Errorf("rabbitmq: delete %s: %w", q, last)
}
