package rabbitmq

import (
	"context"
	"fmt"

	"github.com/inboxbench/inboxbench/brokers"
)

var _ brokers.DurabilityReporter = (*Broker)(nil)

// Durability implements brokers.DurabilityReporter. AMQP 0-9-1 cannot read
// a queue's arguments back (that needs the management plugin, which the
// stack does not enable), so the queue type is what the driver declares;
// with a topic it is verified on the server by declaring the first shard
// queue again with the same arguments, which RabbitMQ refuses
// (PRECONDITION_FAILED) when the existing queue's type differs.
//
// What the confirm means (RabbitMQ's quorum queue and publisher confirm
// documentation): a quorum queue confirms a message once a majority of its
// replicas wrote it to their write-ahead log and fsync'ed it. Classic
// durable queues, which the driver does not use, confirm persistent
// messages once their message store wrote them, syncing to disk in
// batches rather than for each message.
func (b *Broker) Durability(ctx context.Context, topic string) (map[string]string, error) {
	out := map[string]string{
		"queue type":         "quorum (declared by the driver: x-queue-type=quorum, durable)",
		"delivery mode":      "persistent",
		"publisher confirms": "on, one per message",
		brokers.FsyncKey:     "yes: a quorum queue confirms after a majority of its replicas fsync'ed the message to their write-ahead log",
	}
	conn, err := b.connection()
	if err != nil {
		return out, err
	}
	if v, ok := conn.Properties["version"].(string); ok {
		out["server"] = "RabbitMQ " + v
	}
	if topic == "" {
		return out, ctx.Err()
	}
	ch, err := b.channel()
	if err != nil {
		return out, err
	}
	defer ch.Close()
	q := queueName(topic, 0)
	if _, err := ch.QueueDeclare(q, true, false, false, false, shardQueueArgs(topic)); err != nil {
		out["queue type"] = "not the driver's quorum queue: " + err.Error()
		out[brokers.FsyncKey] = "unknown: " + q + " is not the quorum queue the driver declares"
		return out, fmt.Errorf("rabbitmq: verify %s: %w", q, err)
	}
	out["queue type"] = "quorum (verified on the server: " + q + " accepts a redeclare as x-queue-type=quorum)"
	return out, ctx.Err()
}
