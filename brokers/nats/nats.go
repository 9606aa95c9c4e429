// Package nats is the NATS JetStream driver (nats.go), registered as
// "nats".
//
// Topology per topic: one stream per shard, "IB_<topic>_<n>" with the one
// subject "ib.<topic>.<n>", and a dead-letter stream "IB_<topic>_DLQ"
// ("ib.<topic>.dlq"), all file storage, limits retention (every group
// reads every message; a topic is deleted with DeleteTopic). The shard
// count is in each stream's metadata, so another process finds it.
//
// Partitioning is client-side: the driver hashes the ordering key onto a
// shard (FNV-1a, driverutil.Shard, as the rabbitmq and none drivers do)
// and publishes to that shard's subject. Not the server's subject
// mapping ({{partition(N,…)}} on a key token): a key would have to be a
// subject token (no dots, spaces or wildcards, which an aggregate id may
// hold), the mapping lives in the server's account configuration rather
// than with the topic, and a stream per shard numbers that shard's
// messages without holes, which is what lets a consumer hand them over
// strictly in order after a redelivery (below).
//
// Publishing: every message carries Nats-Msg-Id = its event id, so a
// stream drops a publish whose id it stored within its Duplicates window
// (SettingDuplicateWindow; JetStream's default 2 minutes): such a
// publish's result is brokers.ErrDeduplicated, and Capabilities
// .BrokerDedup is the window. PublishAsync hands messages to one
// connection in order (so a key's messages keep their order) with
// nats.go's asynchronous publish, blocking while OptPublishWindow are
// unacknowledged; one collector goroutine settles the PubAcks in publish
// order. Publish is PublishAsync and a wait.
//
// Consuming: each group is a durable pull consumer per shard stream,
// explicit acks, AckWait (SettingAckWait), MaxDeliver (SettingMaxDeliver)
// and MaxAckPending = Prefetch, in a priority group with the pinned-client
// policy (nats-server 2.11+): the server hands a shard's messages to one
// subscription at a time, and to another once the pinned one stopped
// pulling for PinnedTTL (SettingPinnedTTL) or unpinned it on Close. A
// subscription has a connection of its own and one worker per shard.
//
// Order: JetStream redelivers a message whose AckWait expired, possibly
// after newer messages of the shard were delivered (a crashed consumer's
// deliveries expire one by one, while its successor already pulls). The
// worker therefore hands messages over strictly by stream sequence: it
// starts at the consumer's ack floor + 1, keeps a message that comes early
// until its predecessors arrived, and after AckWait/2 with a hole asks the
// server for the ack floor again (messages acknowledged by the previous
// owner are never delivered again). Messages held (early, buffered or in
// the Handler) are marked in progress (+WPI) before AckWait runs out, so
// the server does not redeliver them meanwhile.
//
// Verdicts: Ack acks after the Handler returned; Retry holds the
// deliveries and calls the Handler again after the backoff (in place); a
// Reject is copied to the dead-letter stream (headers kept, the event id
// in ib-id, Nats-Msg-Id the stored copy's stream@sequence so a second
// copy of the same stored message is dropped) and then terminated. A
// message delivered MaxDeliver times without a verdict (its consumers
// crashed each time) is dead-lettered the same way without reaching the
// Handler. Crash closes the subscription's connection with nothing of the
// batch acknowledged: the server redelivers after AckWait, and another
// subscription takes the shard over after PinnedTTL, so
// Capabilities.RedeliveryDelay is the larger of the two. Deliveries carry
// the server's delivery count (Redelivered when above 1) and its
// timestamp as BrokerTime.
package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// Name is the driver name.
const Name = "nats"

// Reserved headers.
const (
	HeaderKey = "ib-key" // the ordering key
	headerID  = "ib-id"  // the event id of a dead-letter copy
	// headerSource is the transport id of the message a dead-letter copy
	// came from.
	headerSource = "ib-dlq-source"
	// priorityGroup is the one priority group of every consumer.
	priorityGroup = "ib"
	// shardsMeta is the stream metadata key holding the topic's shards.
	shardsMeta = "ib-shards"
)

// OptPublishWindow bounds the messages published and not yet acknowledged
// by the server (default DefaultPublishWindow, nats.go's own maximum of
// pending asynchronous publishes).
const OptPublishWindow = brokers.OptPublishWindow

// DefaultPublishWindow is OptPublishWindow's default.
const DefaultPublishWindow = 4000

// DefaultDuplicateWindow is JetStream's Duplicates window when the stream
// sets none.
const DefaultDuplicateWindow = 2 * time.Minute

const (
	dialTimeout = 10 * time.Second
	pubTimeout  = 30 * time.Second
)

func init() {
	brokers.Register(Name, brokers.Constructor(New), brokers.Info{Service: "nats", Module: "github.com/nats-io/nats.go"})
}

// Broker is the NATS JetStream driver.
type Broker struct {
	cfg        config.Config
	ackWait    time.Duration
	pinnedTTL  time.Duration
	dupWindow  time.Duration // 0: the server's default
	maxDeliver int
	window     int
	calls      driverutil.Calls

	mu     sync.Mutex
	subs   *driverutil.Subs[*subscription]
	shards map[string]int
	pub    *publisher // the publishing and administration connection
}

// New validates the settings and options; the connection is made on
// first use.
func New(_ context.Context, cfg config.Config, opts brokers.Options) (*Broker, error) {
	if err := brokers.CheckOptions(Name, opts, OptPublishWindow); err != nil {
		return nil, err
	}
	if err := checkURL(cfg.Get(SettingURL)); err != nil {
		return nil, config.Invalid(SettingURL, nil, "%v", err)
	}
	b := &Broker{cfg: cfg, window: DefaultPublishWindow, calls: driverutil.Calls{Driver: Name}, shards: map[string]int{},
		ackWait:   duration(cfg, SettingAckWait, DefaultAckWait),
		pinnedTTL: duration(cfg, SettingPinnedTTL, DefaultPinnedTTL),
		dupWindow: duration(cfg, SettingDuplicateWindow, 0), maxDeliver: DefaultMaxDeliver}
	if v := cfg.Get(SettingMaxDeliver); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, config.Invalid(SettingMaxDeliver, v, "want a positive number")
		}
		b.maxDeliver = n
	}
	window, err := brokers.PublishWindow(Name, opts, DefaultPublishWindow)
	if err != nil {
		return nil, err
	}
	b.window = window
	b.subs = driverutil.NewSubs[*subscription](&b.mu)
	return b, nil
}

// Connect opens a connection with the configured URL(s), named name;
// opts come after the driver's own (a bounded dial, no endless
// reconnects). The stack's readiness check uses it too.
func Connect(cfg config.Config, name string, opts ...natsgo.Option) (*natsgo.Conn, error) {
	all := append([]natsgo.Option{natsgo.Name(name), natsgo.Timeout(dialTimeout), natsgo.RetryOnFailedConnect(false),
		natsgo.MaxReconnects(60), natsgo.ReconnectWait(time.Second)}, opts...)
	nc, err := natsgo.Connect(cfg.Get(SettingURL), all...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", config.Redact(cfg.Get(SettingURL)), err)
	}
	return nc, nil
}

// Name implements brokers.Broker.
func (b *Broker) Name() string { return Name }

// Capabilities implements brokers.Broker.
func (b *Broker) Capabilities() brokers.Capabilities {
	return brokers.Capabilities{
		PerKeyOrder:     true,
		RedeliveryFlag:  true, // NumDelivered > 1
		DeliveryCount:   true, // the server's NumDelivered: it survives consumer crashes
		ConsumerGroups:  true, // a durable consumer per group
		DeadLetter:      true,
		RedeliveryDelay: max(b.ackWait, b.pinnedTTL) + time.Second,
		BrokerDedup:     b.DuplicateWindow(),
		// One server that advertises no other (no cluster): a client
		// dials only the proxied URL (outside.go).
		OutsideProxied: true,
		Description: "NATS JetStream via nats.go: key hashed onto N streams, Nats-Msg-Id = event id, async publish acks, " +
			"a durable pull consumer per stream pinned to one subscription (priority group), explicit acks after the verdict, " +
			"handed over by stream sequence, retry in place, Reject → dead-letter stream, Crash closes the connection unacked",
	}
}

// DuplicateWindow is the Duplicates window of the streams Setup creates.
func (b *Broker) DuplicateWindow() time.Duration {
	if b.dupWindow > 0 {
		return b.dupWindow
	}
	return DefaultDuplicateWindow
}

// token is topic as a subject token and a part of a stream name: what
// neither may hold ('.', '*', '>', whitespace, path separators) becomes
// '_'.
func token(topic string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, topic)
}

// StreamName is the stream of topic's shard n.
func StreamName(topic string, n int) string { return "IB_" + token(topic) + "_" + strconv.Itoa(n) }

// Subject is the subject of topic's shard n.
func Subject(topic string, n int) string { return "ib." + token(topic) + "." + strconv.Itoa(n) }

// DLQStream is topic's dead-letter stream.
func DLQStream(topic string) string { return "IB_" + token(topic) + "_DLQ" }

// DLQSubject is the subject of topic's dead-letter stream.
func DLQSubject(topic string) string { return "ib." + token(topic) + ".dlq" }

// consumerName is group as a durable consumer's name.
func consumerName(group string) string { return token(group) }

// conn returns the publishing and administration connection, opening it
// when missing or closed.
func (b *Broker) conn() (*publisher, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs.Closed() {
		return nil, errors.New("nats: broker is closed")
	}
	if b.pub != nil && !b.pub.nc.IsClosed() {
		return b.pub, nil
	}
	p, err := newPublisher(b.cfg, b.window)
	if err != nil {
		return nil, err
	}
	b.pub = p
	return p, nil
}

// streamConfig is the configuration of one of topic's streams.
func (b *Broker) streamConfig(name, subject string, shards int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld, Replicas: 1, Duplicates: b.dupWindow,
		AllowDirect: true, Metadata: map[string]string{shardsMeta: strconv.Itoa(shards)}}
}

// Setup creates the shard streams and the dead-letter stream. It is
// idempotent; a topic with more shards (its stream number shards exists)
// is an error.
func (b *Broker) Setup(ctx context.Context, topic string, shards int) error {
	if shards < 1 {
		return fmt.Errorf("nats: setup %s: shards must be at least 1, got %d", topic, shards)
	}
	p, err := b.conn()
	if err != nil {
		return err
	}
	if _, err := p.js.Stream(ctx, StreamName(topic, shards)); err == nil {
		return fmt.Errorf("nats: setup %s: stream %s exists, so the topic has more than the %d shards asked for: delete it or use another topic name", topic, StreamName(topic, shards), shards)
	}
	cfgs := []jetstream.StreamConfig{b.streamConfig(DLQStream(topic), DLQSubject(topic), shards)}
	for i := range shards {
		cfgs = append(cfgs, b.streamConfig(StreamName(topic, i), Subject(topic, i), shards))
	}
	for _, sc := range cfgs {
		if _, err := p.js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("nats: create stream %s: %w", sc.Name, err)
		}
	}
	b.mu.Lock()
	b.shards[topic] = shards
	b.mu.Unlock()
	return nil
}

// shardCount is topic's shard count: from Setup in this process, else
// from its dead-letter stream's metadata.
func (b *Broker) shardCount(ctx context.Context, topic string) (int, error) {
	return driverutil.CachedShards(&b.mu, b.shards, topic, func() (int, error) {
		p, err := b.conn()
		if err != nil {
			return 0, err
		}
		s, err := p.js.Stream(ctx, DLQStream(topic))
		if err != nil {
			return 0, fmt.Errorf("nats: topic %s: stream %s: %w (run Setup first)", topic, DLQStream(topic), err)
		}
		n, err := strconv.Atoi(s.CachedInfo().Config.Metadata[shardsMeta])
		if err != nil || n < 1 {
			return 0, fmt.Errorf("nats: topic %s: stream %s holds no shard count (metadata %s): not set up by this driver", topic, DLQStream(topic), shardsMeta)
		}
		return n, nil
	})
}

// DeleteTopic implements brokers.TopicDeleter: every stream of topic,
// consumers and messages with it.
func (b *Broker) DeleteTopic(ctx context.Context, topic string) error {
	p, err := b.conn()
	if err != nil {
		return err
	}
	names := p.js.StreamNames(ctx, jetstream.WithStreamListSubject("ib."+token(topic)+".>"))
	var errs []error
	for name := range names.Name() {
		if err := p.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("nats: delete stream %s: %w", name, err))
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		errs = append(errs, fmt.Errorf("nats: list streams of %s: %w", topic, err))
	}
	b.mu.Lock()
	delete(b.shards, topic)
	b.mu.Unlock()
	return errors.Join(errs...)
}

// Close implements brokers.Broker.
func (b *Broker) Close() error {
	var p *publisher
	first, err := b.subs.Close(func() { p, b.pub = b.pub, nil })
	if !first {
		return nil
	}
	if p != nil {
		p.close()
	}
	b.calls.Close(errors.New("broker is closed"), 5*time.Second)
	return err
}

// DeadLetters implements brokers.DeadLetterReader: the dead-letter
// stream from its first message, nothing removed.
func (b *Broker) DeadLetters(ctx context.Context, topic string, want int) ([]brokers.Message, error) {
	p, err := b.conn()
	if err != nil {
		return nil, err
	}
	var out []brokers.Message
	next := uint64(1)
	for {
		s, err := p.js.Stream(ctx, DLQStream(topic))
		if err != nil {
			return out, fmt.Errorf("nats: dead letters of %s: %w", topic, err)
		}
		for ; next <= s.CachedInfo().State.LastSeq; next++ {
			m, err := s.GetMsg(ctx, next)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return out, fmt.Errorf("nats: dead letter %d of %s: %w", next, topic, err)
			}
			out = append(out, message(m.Header, m.Data))
		}
		if len(out) >= want {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("nats: dead letters of %s: got %d of %d: %w", topic, len(out), want, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// message rebuilds the published Message from a stored message's
// headers and data.
func message(h natsgo.Header, data []byte) brokers.Message {
	m := brokers.Message{Key: h.Get(HeaderKey), ID: h.Get(headerID), Body: data}
	if m.ID == "" {
		m.ID = h.Get(jetstream.MsgIDHeader)
	}
	for k, vs := range h {
		if strings.HasPrefix(k, "ib-") || strings.HasPrefix(k, "Nats-") || len(vs) == 0 {
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = vs[0]
	}
	return m
}
