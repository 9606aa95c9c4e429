package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
)

var _ brokers.DurabilityReporter = (*Broker)(nil)

// Durability implements brokers.DurabilityReporter. AMQP 0-9-1 cannot read
// a queue's arguments back (that needs the management plugin, which the
// stack does not enable), so the queue type and, when SettingQuorumSize
// sets it, the quorum queue's members are what the driver declares; with
// a topic both are verified on the server by declaring the first shard
// queue again with the same arguments, which RabbitMQ refuses
// (PRECONDITION_FAILED) when the existing queue's differ. The nodes are
// counted by connecting to each URL given.
//
// What the confirm means (RabbitMQ's quorum queue and publisher confirm
// documentation): a quorum queue confirms a message once a majority of its
// replicas wrote it to their write-ahead log and fsync'ed it. A classic
// durable queue lives on one node and confirms a persistent message once
// that node's message store wrote it, syncing to disk in batches rather
// than for each message; it is not replicated.
func (b *Broker) Durability(ctx context.Context, topic string) (map[string]string, error) {
	out := map[string]string{
		"queue type":         b.queueType + " (declared by the driver: x-queue-type=" + b.queueType + ", durable)",
		"delivery mode":      "persistent",
		"publisher confirms": "on, one per message",
		"mandatory":          onOff(b.mandatory, "a message no queue takes is returned and fails", "a message no queue takes is confirmed and dropped"),
		"nodes":              b.nodes(ctx),
	}
	switch {
	case b.queueType == QueueClassic:
		out["replication"] = "none: a classic queue and its messages live on the node that declared it"
		out[brokers.FsyncKey] = "yes, on one node: a classic queue confirms a persistent message once its node's message store wrote and synced it (in batches)"
	case b.quorumSize > 0:
		out["quorum members"] = strconv.Itoa(b.quorumSize) + " (declared: x-quorum-initial-group-size)"
		fallthrough
	default:
		out["replication"] = "Raft: a quorum queue confirms once a majority of its members have the message"
		out[brokers.FsyncKey] = "yes: a quorum queue confirms after a majority of its replicas fsync'ed the message to their write-ahead log"
	}
	if b.queueType == QueueQuorum && b.quorumSize == 0 {
		out["quorum members"] = "the cluster's default (quorum_cluster_size, 3 unless configured, capped at the cluster's nodes): not readable over AMQP 0-9-1"
	}
	switch {
	case b.queueType == QueueClassic:
		out[brokers.ReplicatedKey] = "no: a classic queue is on one node"
	case b.quorumSize >= 2:
		out[brokers.ReplicatedKey] = fmt.Sprintf("yes: a quorum queue of %d members confirms once %d of them have the message", b.quorumSize, b.quorumSize/2+1)
	case b.quorumSize == 1:
		out[brokers.ReplicatedKey] = "no: quorum queues of one member"
	case len(b.urls) == 1:
		out[brokers.ReplicatedKey] = "no: one node given (rabbitmq.url), so its quorum queues have that one member unless the URL leads to a cluster (set rabbitmq.quorum-size to declare and verify the members)"
	default:
		out[brokers.ReplicatedKey] = "yes: quorum queues of the cluster's default size (3, capped at its nodes) confirm once a majority has the message"
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
	if _, err := ch.QueueDeclare(q, true, false, false, false, b.shardQueueArgs(topic)); err != nil {
		out["queue type"] = "not the driver's " + b.queueType + " queue: " + err.Error()
		out[brokers.FsyncKey] = "unknown: " + q + " is not the queue the driver declares"
		return out, fmt.Errorf("rabbitmq: verify %s: %w", q, err)
	}
	out["queue type"] = b.queueType + " (verified on the server: " + q + " accepts a redeclare as x-queue-type=" + b.queueType + ")"
	if b.queueType == QueueQuorum && b.quorumSize > 0 {
		out["quorum members"] = strconv.Itoa(b.quorumSize) + " (verified on the server: " + q + " accepts a redeclare with x-quorum-initial-group-size=" + strconv.Itoa(b.quorumSize) + ")"
	}
	return out, ctx.Err()
}

// nodes says how many of the URLs given answer, and as which cluster.
func (b *Broker) nodes(ctx context.Context) string {
	answering, clusters := 0, map[string]bool{}
	var name string
	for _, u := range b.urls {
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: dialer(ctx), Properties: amqp.Table{"connection_name": "inboxbench-durability"}})
		if err != nil {
			continue
		}
		answering++
		if c, ok := conn.Properties["cluster_name"].(string); ok && !clusters[c] {
			clusters[c] = true
			name = c
		}
		_ = conn.Close()
	}
	s := fmt.Sprintf("%d given (%s), %d answering", len(b.urls), config.Redact(strings.Join(b.urls, ",")), answering)
	switch len(clusters) {
	case 0:
	case 1:
		s += ", cluster " + name
	default:
		s += fmt.Sprintf(", in %d different clusters: the URLs are not the nodes of one cluster", len(clusters))
	}
	return s
}

func onOff(on bool, yes, no string) string {
	if on {
		return "on: " + yes
	}
	return "off: " + no
}
