// Package redis is the Redis Streams driver (go-redis), registered as
// "redis".
//
// Topology per topic: N streams "<topic>.0" … "<topic>.<N-1>", the
// ordering key hashed onto one of them (FNV-1a, driverutil.Shard, as the
// rabbitmq and none drivers do), a dead-letter stream "<topic>.dlq" and a
// hash "<topic>.meta" holding the shard count, so a process that did not
// run Setup finds the streams. An entry's fields are the event id, the
// key, the body and each header as "h:<name>"; BrokerTime is the
// server's time in the entry id (its milliseconds).
//
// Publishing: one publisher per stream sends everything handed over
// meanwhile as one pipeline of XADD NOMKSTREAM, one pipeline in flight per
// stream (so one key's messages reach the stream in hand-over order), and
// settles each message from its reply. PublishAsync blocks while
// OptPublishWindow of a stream's messages are handed over and not
// confirmed. A confirm is the server's reply: what it survives is the
// server's appendfsync (Durability; compose/redis).
//
// Consuming: a subscription is a consumer of the group on every stream of
// the topic (XGROUP CREATE … 0: a new group starts at the beginning; each
// group receives every entry), under a consumer name of its own. One
// worker per stream reads it only while it holds the stream's lease for
// the group ("<stream>.lease.<group>", SET NX PX OptLease, renewed every
// fifth of it and given up when a renewal fails past three fifths of it),
// so a stream has one active reader at a time, and reads in order:
//
//  1. XAUTOCLAIM (JUSTID, from 0-0, no idle minimum: the lease already
//     waited out the previous reader) moves every entry another consumer
//     of the group left pending to this one;
//  2. XREADGROUP from ID 0 reads this consumer's pending entries, oldest
//     first, with their delivery counts from XPENDING;
//  3. then XREADGROUP ">" the stream's new entries (BLOCK 250ms).
//
// Why the lease: Redis hands a crashed consumer's pending entries to
// another only when it claims them, after an idle time of its choosing,
// while the group's other consumers go on reading newer entries with
// ">". Claimed entries therefore arrive after newer ones of the same
// keys: per-key order breaks at every crash. With one reader per stream,
// and that reader taking the pending entries first, nothing newer is
// read before them. What it costs: a crashed reader's stream waits until
// its lease expires (Capabilities.RedeliveryDelay), and a reader that
// stalls past its lease without noticing (a paused process) can overlap
// with its successor for the rest of the batch it holds — the inbox's
// deduplication covers that, its order does not.
//
// Verdicts (the handling is driverutil's): Ack is an XACK after the
// Handler returned, one for all the entries of a read (up to Prefetch)
// once they are handled, or sooner with a Reject; Retry keeps the
// deliveries and what follows in place (pending, unacknowledged) and
// calls the Handler again after the backoff; Reject adds the entry to
// "<topic>.dlq" and acknowledges it (and what was acknowledged before it)
// in one MULTI/EXEC, so it is neither lost nor both dead-lettered and
// redelivered; Crash sends no XACK more — what the read's earlier calls
// acknowledged is delivered again, as Kafka's offsets not yet committed
// are — gives the leases up (as a process that died would, once they
// expire; a Kafka consumer's Crash leaves the group the same way) and
// ends the subscription with ErrCrashed. Delivery.
// DeliveryCount is the group's delivery count of the entry (XPENDING):
// 1 for a new entry, more for one read again from the pending list after
// a crash or a takeover; Redelivered is DeliveryCount > 1.
//
// Retention: a stream keeps an entry until every group of the stream has
// acknowledged it; the stream's reader then trims it (XTRIM MINID ~ to
// the oldest entry some group has pending or not yet read, at most once a
// second). A group created after that starts at the first entry left, not
// at the stream's beginning.
package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// Name is the driver name.
const Name = "redis"

// Names of a topic's keys beside its shard streams "<topic>.<i>".
const (
	DLQSuffix   = ".dlq"  // the dead-letter stream
	MetaSuffix  = ".meta" // hash: shards
	LeaseInfix  = ".lease."
	fieldShards = "shards"
)

// Fields of a stream entry.
const (
	FieldID     = "id"
	FieldKey    = "key"
	FieldBody   = "body"
	HeaderField = "h:" // prefix of a header's field
	// FieldFrom is the dead-letter entry's origin (its TransportID).
	FieldFrom = "from"
)

// Option keys accepted in brokers.Options.
const (
	// OptPublishWindow bounds the messages per stream handed over and not
	// yet confirmed (default DefaultPublishWindow).
	OptPublishWindow = brokers.OptPublishWindow
	// OptLease is how long a stream's lease lasts without renewal (Go
	// duration, default DefaultLease): how long a crashed reader's
	// stream waits for its successor.
	OptLease = "lease"
)

// Defaults of the options.
const (
	DefaultPublishWindow = 256
	DefaultLease         = 5 * time.Second
)

func init() {
	brokers.Register(Name, brokers.Constructor(New), brokers.Info{Service: "redis", Module: "github.com/redis/go-redis/v9"})
}

// Broker is the Redis Streams driver.
type Broker struct {
	cfg    config.Config
	client *goredis.Client // publishing and topology
	window int
	lease  time.Duration
	calls  driverutil.Calls

	mu     sync.Mutex
	shards map[string]int
	pubs   map[string][]*streamPub
	subs   *driverutil.Subs[*subscription]
}

// New validates the options; connections are opened on first use.
func New(_ context.Context, cfg config.Config, opts brokers.Options) (*Broker, error) {
	if err := brokers.CheckOptions(Name, opts, OptPublishWindow, OptLease); err != nil {
		return nil, err
	}
	window, err := brokers.PublishWindow(Name, opts, DefaultPublishWindow)
	if err != nil {
		return nil, err
	}
	lease := DefaultLease
	if v, ok := opts[OptLease]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 500*time.Millisecond {
			return nil, fmt.Errorf("redis: option %s=%q: want a Go duration of at least 500ms, such as 5s", OptLease, v)
		}
		lease = d
	}
	o, err := clientOptions(cfg, 16)
	if err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, client: goredis.NewClient(o), window: window, lease: lease,
		calls: driverutil.Calls{Driver: Name}, shards: map[string]int{}, pubs: map[string][]*streamPub{}}
	b.subs = driverutil.NewSubs[*subscription](&b.mu)
	return b, nil
}

// Name implements brokers.Broker.
func (b *Broker) Name() string { return Name }

// Capabilities implements brokers.Broker.
func (b *Broker) Capabilities() brokers.Capabilities {
	return brokers.Capabilities{
		PerKeyOrder:     true,
		RedeliveryFlag:  true,
		DeliveryCount:   true,
		ConsumerGroups:  true,
		DeadLetter:      true,
		RedeliveryDelay: b.lease + b.lease/5,
		OutsideProxied:  true, // one address per connection: the proxy's (outside.go)
		Description: "Redis Streams via go-redis: key hashed onto N streams, one reader per stream and group at a time (a lease), " +
			"pending entries first (XAUTOCLAIM, then XREADGROUP 0, then >), pipelined XADD, XACK after the handler, " +
			"retry in place, Reject → <topic>.dlq with the XACK in one MULTI, Crash acks nothing and gives the leases up",
	}
}

// StreamName is shard i's stream of topic.
func StreamName(topic string, i int) string { return topic + "." + strconv.Itoa(i) }

// Setup records the shard count in "<topic>.meta" and creates the
// streams (empty: XGROUP CREATE MKSTREAM of a group it destroys at once),
// so that XADD NOMKSTREAM finds them and a deleted topic is not created
// again by a late publish.
func (b *Broker) Setup(ctx context.Context, topic string, shards int) error {
	if shards < 1 {
		return fmt.Errorf("redis: setup %s: shards must be at least 1, got %d", topic, shards)
	}
	meta := topic + MetaSuffix
	if err := b.client.HSetNX(ctx, meta, fieldShards, shards).Err(); err != nil {
		return b.errorf("setup %s: %w", topic, err)
	}
	have, err := b.client.HGet(ctx, meta, fieldShards).Int()
	if err != nil {
		return b.errorf("setup %s: read %s: %w", topic, meta, err)
	}
	if have != shards {
		return fmt.Errorf("redis: setup %s: the topic exists with %d shards, asked for %d: delete it or use another topic name", topic, have, shards)
	}
	const setupGroup = "ib-setup"
	cmds, _ := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := 0; i < shards; i++ {
			p.XGroupCreateMkStream(ctx, StreamName(topic, i), setupGroup, "$")
			p.XGroupDestroy(ctx, StreamName(topic, i), setupGroup)
		}
		p.XGroupCreateMkStream(ctx, topic+DLQSuffix, setupGroup, "$")
		p.XGroupDestroy(ctx, topic+DLQSuffix, setupGroup)
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); err != nil && !isBusyGroup(err) {
			return b.errorf("setup %s: create its streams: %w", topic, err)
		}
	}
	b.mu.Lock()
	b.shards[topic] = shards
	b.mu.Unlock()
	return nil
}

// isBusyGroup is the answer to creating a group that exists.
func isBusyGroup(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "BUSYGROUP") }

// shardCount returns topic's shard count, from Setup in this process or
// from "<topic>.meta".
func (b *Broker) shardCount(ctx context.Context, topic string) (int, error) {
	return driverutil.CachedShards(&b.mu, b.shards, topic, func() (int, error) {
		n, err := b.client.HGet(ctx, topic+MetaSuffix, fieldShards).Int()
		if errors.Is(err, goredis.Nil) {
			return 0, fmt.Errorf("redis: topic %s does not exist (no %s): run Setup first", topic, topic+MetaSuffix)
		}
		if err != nil {
			return 0, b.errorf("find the shards of %s: %w", topic, err)
		}
		return n, nil
	})
}

// errorf is a driver error, naming the server.
func (b *Broker) errorf(format string, a ...any) error {
	return explain(b.cfg, fmt.Errorf(format, a...))
}

// Publish implements brokers.Broker: PublishAsync and a wait.
func (b *Broker) Publish(ctx context.Context, topic string, msgs []brokers.Message) []error {
	return brokers.PublishWait(ctx, b, topic, msgs)
}

// PublishAsync implements brokers.AsyncPublisher: each message goes to
// its stream's publisher, blocking while OptPublishWindow of that
// stream's messages are unconfirmed; the publisher settles them (and
// runs done) as the replies of its pipelines come, in order.
func (b *Broker) PublishAsync(ctx context.Context, topic string, msgs []brokers.Message, done func([]error)) {
	queues := func() ([]*streamPub, error) { return b.publishers(ctx, topic) }
	driverutil.Spread(ctx, b.calls.Start(ctx, topic, msgs, done), queues)
}

// publishers returns topic's stream publishers, starting them on first
// use.
func (b *Broker) publishers(ctx context.Context, topic string) ([]*streamPub, error) {
	b.mu.Lock()
	qs, ok := b.pubs[topic]
	b.mu.Unlock()
	if ok {
		return qs, nil
	}
	n, err := b.shardCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs.Closed() {
		return nil, errors.New("redis: broker is closed")
	}
	if qs, ok := b.pubs[topic]; ok {
		return qs, nil
	}
	qs = make([]*streamPub, n)
	for i := range qs {
		qs[i] = newStreamPub(b, StreamName(topic, i))
	}
	b.pubs[topic] = qs
	return qs, nil
}

// DeleteTopic implements brokers.TopicDeleter: the streams, the
// dead-letter stream and the meta hash. The leases expire by themselves.
func (b *Broker) DeleteTopic(ctx context.Context, topic string) error {
	n, err := b.shardCount(ctx, topic)
	if err != nil {
		n = 0 // no meta: delete what else there is
	}
	keys := []string{topic + MetaSuffix, topic + DLQSuffix}
	for i := 0; i < n; i++ {
		keys = append(keys, StreamName(topic, i))
	}
	if err := b.client.Del(ctx, keys...).Err(); err != nil {
		return b.errorf("delete topic %s: %w", topic, err)
	}
	b.mu.Lock()
	delete(b.shards, topic)
	qs := b.pubs[topic]
	delete(b.pubs, topic)
	b.mu.Unlock()
	for _, q := range qs {
		q.close()
	}
	return nil
}

// Close implements brokers.Broker.
func (b *Broker) Close() error {
	var pubs map[string][]*streamPub
	first, err := b.subs.Close(func() {
		pubs = b.pubs
		b.pubs = map[string][]*streamPub{}
	})
	if !first {
		return nil
	}
	for _, qs := range pubs {
		for _, q := range qs {
			q.close()
		}
	}
	b.calls.Close(errors.New("broker is closed"), 5*time.Second)
	return errors.Join(err, b.client.Close())
}
