// Package kafkashare is the Kafka share-group driver (KIP-932, "queues for
// Kafka", production-ready since Kafka 4.2), registered as "kafka-share".
// It is the kafka driver (brokers/kafka) for everything but consuming:
// the same settings, producer, topics, "<topic>.dlq" dead-letter topic,
// durability report and listener for services under test; a subscription
// joins a share group (franz-go's kgo.ShareGroup) instead of a consumer
// group.
//
// A share group hands records, not partitions, to its members: each
// record a member fetches is acquired under a lock
// (share.record.lock.duration.ms) and acknowledged one by one — ACCEPT
// (done), RELEASE (deliver again, to any member, its delivery count + 1)
// or REJECT (archived, never delivered again); a record whose lock runs
// out goes back as if released, and one delivered
// share.delivery.count.limit times is archived instead. There is no order:
// records of one partition are handled by several members at once, a
// released record comes back after newer ones. So the driver declares no
// PerKeyOrder, and the inbox's versions and parking carry all of it.
//
// Mapping:
//   - A subscription is one member (a kgo client in the share group) and
//     its loop: poll at most Prefetch records (acquired only then: no
//     fetch runs ahead, so what waits under lock, and what later versions
//     may overtake, stays small), hand each partition's records to the
//     Handler on a goroutine of their own, in offset order, in batches of
//     up to MaxBatch (never waiting to fill one), acknowledge each by its
//     verdict, poll again (the poll's fetch carries the acknowledgements).
//     With one member per partition and the fetches running ahead, a hot
//     aggregate had more versions in flight than the inbox parks (1,000),
//     and they were dead-lettered (measured: the default workload).
//   - Ack → ACCEPT, only after the Handler returned. Reject → a copy to
//     "<topic>.dlq" (confirmed), then REJECT. Retry → after the backoff,
//     RELEASE of the delivery and the rest of its batch (the Handler's
//     answers after a Retry are ignored, as in every driver): the broker
//     delivers them again with DeliveryCount + 1, possibly to another
//     member. On a delivery's last allowed delivery (the limit, set on the
//     group) a release would archive it: that batch is retried in place
//     instead. Crash → the subscription's clients are closed without
//     another verdict; what was not acknowledged is released (a real crash
//     leaves it locked until the lock runs out).
//   - DeliveryCount is the broker's (kept across members and crashes);
//     Redelivered is DeliveryCount > 1.
//
// The implicit accept: franz-go, like Kafka's own share consumer, accepts
// every record of the previous poll that has no acknowledgement yet when
// the consumer polls again. A member therefore never polls while a record
// it handed out has no verdict: it polls only after every record of the
// previous poll was accepted, released or rejected, and releases any it
// did not settle (a Handler that returned early because the subscription
// closed, a failed dead-letter copy) before that poll or before its
// client closes (member.go).
//
// Before the first member joins, Subscribe sets the group's configuration
// (IncrementalAlterConfigs on the GROUP resource): share.auto.offset.reset
// earliest (else a new group starts at the end of the topic and misses
// what was published before it), the acquisition lock (option
// lock-duration, 20 s; Kafka's default is 30 s) and the delivery
// limit (5, Kafka's default, set so the driver knows the last delivery).
// The user needs ALTER_CONFIGS on the group where an authorizer runs.
package kafkashare

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/config"
)

// Name is the driver's registry name.
const Name = "kafka-share"

// OptLockDuration is the acquisition lock the driver sets on its share
// groups (share.record.lock.duration.ms, a Go duration; default
// DefaultLockDuration). The broker caps it to its
// group.share.min/max.record.lock.duration.ms (15 s to 60 s by default).
// Every other option is the kafka driver's.
const OptLockDuration = "lock-duration"

// DefaultLockDuration is OptLockDuration's default: shorter than Kafka's
// 30 s, so a record a crashed member held comes back sooner. Not the 15 s
// a broker with default settings allows at least: with exactly that on
// the group, Kafka 4.4's own share consumer (ShareConsumerPerformance,
// which `bench calibrate` runs in the same group configuration) received
// no record at all, while with 20 s or 30 s it did (measured).
const DefaultLockDuration = 20 * time.Second

// DeliveryLimit is the share.delivery.count.limit the driver sets on its
// groups: Kafka's default, set so the driver knows which delivery is the
// last one (a RELEASE then archives the record).
const DeliveryLimit = 5

// SessionTimeout is Kafka's default share.session.timeout.ms (and the
// smallest a broker with default settings allows): a member that stopped
// heartbeating keeps its partitions that long.
const SessionTimeout = 45 * time.Second

func init() {
	brokers.Register(Name, brokers.Constructor(New), brokers.Info{Service: "kafka", Module: "github.com/twmb/franz-go"})
}

// What the driver has from the kafka driver, unchanged: publishing,
// the dead-letter topic, topic deletion, the durability report and the
// proxied listener for a service under test (brokers/kafka/outside.go).
var (
	_ brokers.AsyncPublisher     = (*Broker)(nil)
	_ brokers.DeadLetterReader   = (*Broker)(nil)
	_ brokers.TopicDeleter       = (*Broker)(nil)
	_ brokers.DurabilityReporter = (*Broker)(nil)
	_ brokers.Outside            = (*Broker)(nil)
)

// Broker is the share-group driver: the kafka driver with share-group
// subscriptions.
type Broker struct {
	*kafka.Broker
	lock time.Duration

	mu   sync.Mutex
	subs *driverutil.Subs[*subscription]
}

// New opens the driver on the cluster in cfg, as the kafka driver does
// (connections are lazy).
func New(_ context.Context, cfg config.Config, opts brokers.Options) (*Broker, error) {
	lock, rest, err := lockOption(opts)
	if err != nil {
		return nil, err
	}
	kb, err := kafka.NewAs(Name, cfg, rest)
	if err != nil {
		return nil, err
	}
	return wrap(kb, lock), nil
}

// wrap makes the share-group driver of kb.
func wrap(kb *kafka.Broker, lock time.Duration) *Broker {
	b := &Broker{Broker: kb, lock: lock}
	b.subs = driverutil.NewSubs[*subscription](&b.mu)
	return b
}

// lockOption takes OptLockDuration out of opts, leaving the kafka
// driver's options.
func lockOption(opts brokers.Options) (time.Duration, brokers.Options, error) {
	v, ok := opts[OptLockDuration]
	if !ok {
		return DefaultLockDuration, opts, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		return 0, nil, fmt.Errorf("%s: option %s=%q: want a Go duration of at least 1s, such as 20s", Name, OptLockDuration, v)
	}
	rest := brokers.Options{}
	for k, v := range opts {
		if k != OptLockDuration {
			rest[k] = v
		}
	}
	return d, rest, nil
}

// Name implements brokers.Broker.
func (b *Broker) Name() string { return Name }

// Capabilities implements brokers.Broker: the kafka driver's, but no
// per-key order, the broker's delivery count (and so a redelivered flag),
// no use for transactions, and a redelivery after a crash bounded by the
// session timeout (a dead member keeps its partitions that long; the
// records it held come back after the lock, which is shorter).
func (b *Broker) Capabilities() brokers.Capabilities {
	c := b.Broker.Capabilities()
	c.PerKeyOrder, c.Transactions = false, false
	c.RedeliveryFlag, c.DeliveryCount = true, true
	c.RedeliveryDelay = max(b.lock, SessionTimeout) + time.Second
	c.Description = "Kafka share group (KIP-932) via franz-go: the kafka driver's producer and topics; records acquired " +
		"under a " + b.lock.String() + " lock, at most Prefetch per subscription, no order, ACCEPT after the Handler, " +
		"RELEASE on Retry (after the backoff), copy to <topic>.dlq then REJECT, the broker's delivery count; " +
		"never polls while a record has no verdict (a poll accepts the previous poll's records)"
	if c.InProcess {
		c.Description = "in-process kfake cluster — not a performance target; " + c.Description
	}
	return c
}

// Close implements brokers.Broker: the share subscriptions, then the
// kafka driver's producer.
func (b *Broker) Close() error {
	first, err := b.subs.Close(nil)
	if !first {
		return nil
	}
	if cerr := b.Broker.Close(); cerr != nil {
		return cerr
	}
	return err
}

// groupConfigs are what Subscribe sets on a share group before it joins.
func (b *Broker) groupConfigs() map[string]string {
	return map[string]string{
		"share.auto.offset.reset":       "earliest",
		"share.record.lock.duration.ms": strconv.FormatInt(b.lock.Milliseconds(), 10),
		"share.delivery.count.limit":    strconv.Itoa(DeliveryLimit),
	}
}

// sharing fails unless the cluster has share groups on: a member of a
// cluster without them is never given a record, and says nothing.
func (b *Broker) sharing(ctx context.Context) error {
	level, supported, err := kafka.Feature(ctx, b.Admin(), kafka.ShareFeature)
	switch {
	case err != nil:
		return b.Errorf("subscribe: ask the cluster for its features: %w", err)
	case level >= 1:
		return nil
	case supported < 1:
		return b.Errorf("the cluster has no share groups (it supports %s up to %d): they need Kafka 4.2 or later", kafka.ShareFeature, supported)
	}
	return b.Errorf("share groups are off on this cluster (%s is not finalized; the brokers support up to %d; a cluster formatted by Kafka 4.1 or earlier keeps them off after an upgrade): finalize it with `kafka-features.sh --bootstrap-server … upgrade --feature %s=1` (`bench stack up` does on the local stack)",
		kafka.ShareFeature, supported, kafka.ShareFeature)
}

// ConfigureGroup sets the share group's configuration (groupConfigs)
// with IncrementalAlterConfigs on the GROUP resource, once the cluster
// was found to have share groups on. Subscribe calls it; so does `bench
// calibrate` for the vendor's share consumer.
func (b *Broker) ConfigureGroup(ctx context.Context, group string) error {
	if err := b.sharing(ctx); err != nil {
		return err
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for k, v := range b.groupConfigs() {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = k, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(v)
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, b.Client())
	if err != nil {
		return b.Errorf("configure share group %s: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return b.Errorf("configure share group %s (share groups need Kafka 4.2+ with share.version ≥ 1): %w%s", group, err, msg)
		}
	}
	return nil
}
