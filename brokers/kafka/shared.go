package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxbench/inboxbench/brokers"
)

// What a driver built on this one (kafka-share, brokers/kafkashare) takes
// from it: the clients' settings, the topic administration, the
// dead-letter topic and the mapping of a record to a Delivery, so both
// drivers create, fill and read topics the same way and only consume
// differently.

// ClientOptions are the options every client of the driver starts from
// (seeds, TLS, SASL, client id, timeouts); the caller appends its own.
func (b *Broker) ClientOptions() []kgo.Opt { return b.base[:len(b.base):len(b.base)] }

// Admin is the driver's admin client (on its producer's connections).
func (b *Broker) Admin() *kadm.Client { return b.adm }

// Client is the driver's producer, for requests kadm has no call for.
func (b *Broker) Client() *kgo.Client { return b.prod }

// Errorf is an error prefixed with the driver's name, a refusal of the
// connection settings among args explained (Explain).
func (b *Broker) Errorf(format string, args ...any) error { return b.errorf(format, args...) }

// CheckTopic fails when topic does not exist (Setup has not run) or the
// cluster does not answer within ctx: a subscription checks it before it
// polls forever.
func (b *Broker) CheckTopic(ctx context.Context, topic string) error {
	details, err := b.adm.ListTopics(ctx, topic)
	if err != nil {
		return b.errorf("subscribe %s: %w", topic, err)
	}
	if d, ok := details[topic]; !ok || d.Err != nil {
		return b.errorf("subscribe %s: topic does not exist (run Setup first): %v", topic, d.Err)
	}
	return nil
}

// Partitions is how many partitions topic has.
func (b *Broker) Partitions(ctx context.Context, topic string) (int, error) {
	details, err := b.adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, b.errorf("metadata of %s: %w", topic, err)
	}
	d, ok := details[topic]
	if !ok || d.Err != nil {
		return 0, b.errorf("metadata of %s: topic does not exist (run Setup first): %v", topic, d.Err)
	}
	return len(d.Partitions), nil
}

// DeadLetter produces a copy of r to its topic's dead-letter topic
// (DLQSuffix: same key, value and headers, plus the transport id it came
// from) and waits for the copy's confirmation.
func (b *Broker) DeadLetter(ctx context.Context, r *kgo.Record) error {
	id := TransportID(r)
	dl := &kgo.Record{
		Topic:   r.Topic + DLQSuffix,
		Key:     r.Key,
		Value:   r.Value,
		Headers: append(append([]kgo.RecordHeader(nil), r.Headers...), kgo.RecordHeader{Key: headerSource, Value: []byte(id)}),
	}
	if err := b.prod.ProduceSync(ctx, dl).FirstErr(); err != nil {
		return fmt.Errorf("dead-letter %s to %s: %w", id, dl.Topic, err)
	}
	return nil
}

// Message rebuilds the published Message from a record.
func Message(r *kgo.Record) brokers.Message { return message(r) }

// TransportID is a record's "<topic>/<partition>@<offset>".
func TransportID(r *kgo.Record) string {
	return transportID(transportPrefix(r.Topic, r.Partition), r.Offset)
}

// ShareFeature is the cluster feature that turns share groups (KIP-932)
// on: level 1 from Kafka 4.2 (preview in 4.1). A cluster formatted by a
// 4.2+ release has it; one formatted by an earlier release keeps its
// finalized features across an upgrade of the software, so it has not,
// until an UpdateFeatures finalizes it (compose/kafka does for the local
// stack; `kafka-features.sh upgrade --feature share.version=1` does by
// hand).
const ShareFeature = "share.version"

// Feature reports the finalized level of a cluster feature (0 when it is
// not finalized) and the highest level the first broker that answered
// supports.
func Feature(ctx context.Context, adm *kadm.Client, name string) (finalized, supported int16, err error) {
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			err = v.Err
			continue
		}
		for _, f := range v.Raw().FinalizedFeatures {
			if f.Name == name {
				finalized = f.MaxVersionLevel
			}
		}
		for _, f := range v.Raw().SupportedFeatures {
			if f.Name == name {
				supported = f.MaxVersion
			}
		}
		return finalized, supported, nil
	}
	return 0, 0, fmt.Errorf("no broker answered ApiVersions: %w", err)
}

// CloseClient closes a client, giving up waiting after 15s (an
// unreachable cluster); it reports whether the close finished.
func CloseClient(cl *kgo.Client) bool { return closeBounded(cl) }

// closeTimeout is how long CloseClient waits.
const closeTimeout = 15 * time.Second
