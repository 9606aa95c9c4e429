package brokers

import "context"

// DurabilityReporter is implemented by drivers that can say what a
// publisher confirm means on the server they talk to: the settings that
// decide whether a confirmed message survives a crash of the broker
// (acks, replication, fsync before the confirm), read from the server
// where the protocol allows it. Keys are the server's own setting names
// where there is one ("flush.messages", "flushDiskType"), plus
// "fsync before confirm", a one-line verdict every driver fills in.
type DurabilityReporter interface {
	// Durability reports the broker-wide settings, and topic's own when
	// topic is not empty.
	Durability(ctx context.Context, topic string) (map[string]string, error)
}

// FsyncKey is the verdict every DurabilityReporter fills in: "yes …" when
// a confirmed message was fsync'ed by the broker before the confirm, "no …"
// when the confirm comes from memory or the page cache.
const FsyncKey = "fsync before confirm"

// ReplicatedKey is the replication verdict a DurabilityReporter fills in
// where the server says: "yes …" when a confirm waits for copies on other
// nodes (Kafka acks=all with min.insync.replicas ≥ 2, a quorum queue's
// majority, RocketMQ's in-sync set), "no …" when one node's word is the
// confirm. Reports show it beside FsyncKey.
const ReplicatedKey = "replicated before confirm"

// DurabilityOf returns what b reports through DurabilityReporter, nil when
// the driver does not implement it, and {"error": …} when asking failed,
// so a result can always record something.
func DurabilityOf(ctx context.Context, b Broker, topic string) map[string]string {
	r, ok := b.(DurabilityReporter)
	if !ok {
		return nil
	}
	m, err := r.Durability(ctx, topic)
	if err != nil {
		if m == nil {
			m = map[string]string{}
		}
		m["error"] = err.Error()
	}
	return m
}
