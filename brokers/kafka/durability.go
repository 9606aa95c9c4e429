package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxbench/inboxbench/brokers"
)

var _ brokers.DurabilityReporter = (*Broker)(nil)

// brokerDurabilityKeys are the broker settings that decide what acks=all
// means on one broker: the flush defaults (Kafka never fsyncs on its own
// unless told to; durability comes from replication) and the replication
// defaults of new topics.
var brokerDurabilityKeys = []string{"log.flush.interval.messages", "log.flush.interval.ms", "min.insync.replicas", "default.replication.factor"}

// topicDurabilityKeys are the same, per topic.
var topicDurabilityKeys = []string{"flush.messages", "flush.ms", "min.insync.replicas", "unclean.leader.election.enable"}

// Durability implements brokers.DurabilityReporter: the producer's acks
// (a client setting), the first broker's flush and replication defaults
// (DescribeConfigs), and with a topic its replication factor (metadata)
// and its effective flush.messages, flush.ms and min.insync.replicas.
func (b *Broker) Durability(ctx context.Context, topic string) (map[string]string, error) {
	out := map[string]string{"acks": "all (client: leader waits for the in-sync replicas)", "idempotent producer": "yes (client)"}
	if b.acks == AcksLeader {
		out["acks"] = "1 (client: the leader alone; a failover can lose what it confirmed)"
		out["idempotent producer"] = "no (client: needs acks=all)"
	}
	if b.fake != nil {
		out[brokers.FsyncKey] = "no: kafka-embedded keeps everything in this process's memory"
		return out, nil
	}
	md, err := b.adm.BrokerMetadata(ctx)
	if err != nil {
		return out, fmt.Errorf("kafka: metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return out, errors.New("kafka: metadata lists no broker")
	}
	rcs, err := b.adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		return out, fmt.Errorf("kafka: describe broker %d configs: %w", md.Brokers[0].NodeID, err)
	}
	pick(out, rcs, "broker ", brokerDurabilityKeys)
	flush := out["broker log.flush.interval.messages"]
	if topic != "" {
		tds, err := b.adm.ListTopics(ctx, topic)
		if err != nil {
			return out, fmt.Errorf("kafka: metadata of %s: %w", topic, err)
		}
		if td, ok := tds[topic]; ok && td.Err == nil {
			for _, p := range td.Partitions {
				out["replication.factor"] = strconv.Itoa(len(p.Replicas))
				break
			}
		}
		rcs, err := b.adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return out, fmt.Errorf("kafka: describe configs of %s: %w", topic, err)
		}
		pick(out, rcs, "", topicDurabilityKeys)
		flush = out["flush.messages"]
	}
	out[brokers.ReplicatedKey] = replicated(out)
	if flush == "1" {
		out[brokers.FsyncKey] = "yes: flush.messages=1 fsyncs the log after every append, before the produce response"
	} else {
		out[brokers.FsyncKey] = "no: acknowledged once in the page cache of the in-sync replicas; the OS writes it back later (flush.messages " + flush + ")"
	}
	return out, nil
}

// pick copies keys from the first resource of rcs into out, prefixed.
func pick(out map[string]string, rcs kadm.ResourceConfigs, prefix string, keys []string) {
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			for _, k := range keys {
				if c.Key == k {
					v := c.MaybeValue()
					switch v {
					case "":
						v = "unset"
					case "9223372036854775807": // Long.MAX_VALUE: the default, never
						v += " (never)"
					}
					out[prefix+k] = v
				}
			}
		}
		return
	}
}

// replicated is the replication verdict: acks=all waits for the in-sync
// replicas, and min.insync.replicas (the topic's, else the broker's)
// bounds how few of them may answer.
func replicated(out map[string]string) string {
	rf := out["replication.factor"]
	if rf == "" {
		rf = out["broker default.replication.factor"]
	}
	isr := out["min.insync.replicas"]
	if isr == "" {
		isr = out["broker min.insync.replicas"]
	}
	n, _ := strconv.Atoi(isr)
	switch {
	case !strings.HasPrefix(out["acks"], "all"):
		return "no: acks=1, the leader alone confirms (replication factor " + rf + ")"
	case rf == "1":
		return "no: replication factor 1, one copy"
	case n < 2:
		return "no: acks=all, but min.insync.replicas=" + isr + " lets the leader alone confirm when the others fall behind (replication factor " + rf + ")"
	}
	return "yes: acks=all waits for the in-sync replicas, at least min.insync.replicas=" + isr + " of replication factor " + rf
}
