// Package kafka is the Kafka driver (franz-go), registered as "kafka" and,
// against an in-process kfake cluster, as "kafka-embedded".
//
// Ordering: records are keyed by the ordering key and partitioned with
// kgo.StickyKeyPartitioner (murmur2 of the key, as the Java client), so a
// key always lands on one partition; the idempotent producer with acks=all
// keeps a partition's records in send order across retries. The consumer
// runs one goroutine per assigned partition, so a partition's records are
// handled one Handler call at a time, in offset order. A batch is the
// records of the partition already fetched (up to MaxBatch): the worker
// never waits to fill one.
//
// Publishing: PublishAsync hands each record to the producer (kgo's
// Produce with a promise, linger 0), which blocks while OptPublishWindow
// records are buffered or in flight; the promises, and so the calls'
// dones, run on the producer's promise goroutine. Publish is PublishAsync
// and a wait.
//
// Offsets: auto-commit is disabled. A record's offset becomes committable
// only after its Handler returned Ack (or Reject and the dead-letter copy is
// confirmed); a committer flushes those every CommitInterval, and
// OnPartitionsRevoked stops the revoked partitions' workers, then commits
// what they finished — never ahead of the database.
//
// Retry: the partition's worker holds the records from the first Retry
// on (those before it are finished), backs off and calls the Handler again
// with them (in place); later records of that partition wait.
// Reject: the record is produced to "<topic>.dlq" (same key, headers plus
// ib-dlq-source) and then counts as finished.
// Crash: the consumer client is closed without committing anything more;
// records after the last committed offset are redelivered to the next
// member. It leaves the group on the way out (a real crash would hold the
// partitions until the session timeout, which only slows tests down).
// Kafka has no redelivered flag or delivery count: Redelivered is false and
// DeliveryCount 0 on every delivery.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// Driver names.
const (
	Name         = "kafka"
	EmbeddedName = "kafka-embedded"
)

// Reserved headers.
const (
	headerID     = "ib-id"         // Message.ID
	headerSource = "ib-dlq-source" // transport id of the record a DLQ copy came from
)

// DLQSuffix names the dead-letter topic: "<topic>.dlq".
const DLQSuffix = ".dlq"

// Option keys accepted in brokers.Options.
const (
	// OptReplicationFactor for created topics; default -1 = the broker's
	// default.replication.factor (1 on the local single-node stack).
	OptReplicationFactor = "replication-factor"
	// OptCommitInterval is how often finished offsets are committed
	// (Go duration, default 200ms).
	OptCommitInterval = "commit-interval"
	// OptDeliveryTimeout bounds how long a produced record may stay
	// unconfirmed before it is reported failed (default 30s).
	OptDeliveryTimeout = "delivery-timeout"
	// OptCompression is the producer's batch compression: none (the
	// default, as the Java producer's and ProducerPerformance's), gzip,
	// snappy, lz4 or zstd. franz-go's own default is snappy; on loopback
	// there is no bandwidth to save, and compressing and decompressing
	// every batch took a fifth of a drain's CPU.
	OptCompression = "compression"
	// OptPublishWindow bounds the records produced and not yet confirmed
	// (kgo.MaxBufferedRecords): PublishAsync blocks while that many are
	// buffered or in flight (default DefaultPublishWindow, kgo's own).
	OptPublishWindow = brokers.OptPublishWindow
)

// DefaultPublishWindow is OptPublishWindow's default.
const DefaultPublishWindow = 50000

// codecs are the OptCompression values.
var codecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// clientModule is the client library the driver is built on.
const clientModule = "github.com/twmb/franz-go"

func init() {
	brokers.Register(Name, brokers.Constructor(New), brokers.Info{Service: "kafka", Module: clientModule})
	// The embedded cluster (kfake) lives in this process: no service.
	brokers.Register(EmbeddedName, func(ctx context.Context, cfg config.Config, opts brokers.Options) (brokers.Broker, error) {
		return NewEmbedded(ctx, opts)
	}, brokers.Info{Module: clientModule})
}

// Broker is the Kafka driver.
type Broker struct {
	name           string
	acks           string
	base           []kgo.Opt // seeds, TLS, SASL, timeouts: shared by every client
	rf             int16
	commitInterval time.Duration
	fake           *kfake.Cluster // kafka-embedded only
	cfg            config.Config  // what Explain reads the brokers' refusals against

	prod  *kgo.Client
	adm   *kadm.Client
	calls driverutil.Calls

	mu   sync.Mutex
	subs *driverutil.Subs[*subscription]
}

type settings struct {
	acks            string // AcksAll or AcksLeader (SettingAcks)
	rf              int16
	commitInterval  time.Duration
	deliveryTimeout time.Duration
	compression     string
	window          int
}

func parseOptions(driver string, opts brokers.Options) (settings, error) {
	s := settings{rf: -1, commitInterval: 200 * time.Millisecond, deliveryTimeout: 30 * time.Second, compression: "none", window: DefaultPublishWindow}
	if err := brokers.CheckOptions(driver, opts, OptReplicationFactor, OptCommitInterval, OptDeliveryTimeout, OptCompression, OptPublishWindow); err != nil {
		return s, err
	}
	var err error
	if s.window, err = brokers.PublishWindow(driver, opts, DefaultPublishWindow); err != nil {
		return s, err
	}
	if v, ok := opts[OptCompression]; ok {
		if _, known := codecs[v]; !known {
			return s, fmt.Errorf("%s: option %s=%q: want none, gzip, snappy, lz4 or zstd", driver, OptCompression, v)
		}
		s.compression = v
	}
	if v, ok := opts[OptReplicationFactor]; ok {
		n, err := strconv.ParseInt(v, 10, 16)
		if err != nil || (n < 1 && n != -1) {
			return s, fmt.Errorf("%s: option %s=%q: want a positive integer or -1 (broker default)", driver, OptReplicationFactor, v)
		}
		s.rf = int16(n)
	}
	for key, dst := range map[string]*time.Duration{OptCommitInterval: &s.commitInterval, OptDeliveryTimeout: &s.deliveryTimeout} {
		if v, ok := opts[key]; ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return s, fmt.Errorf("%s: option %s=%q: want a positive Go duration such as 500ms", driver, key, v)
			}
			*dst = d
		}
	}
	return s, nil
}

// ClientOpts turns the endpoint configuration into franz-go options:
// seeds, TLS (system roots or the CA file, a client certificate, the
// server name; any of them implies TLS) and SASL (plain, SCRAM). The
// stack's readiness check uses it too, so a cluster that `bench stack
// status` reaches is one the driver reaches.
func ClientOpts(cfg config.Config) ([]kgo.Opt, error) {
	seeds := cfg.List(SettingBrokers)
	if len(seeds) == 0 {
		return nil, config.Invalid(SettingBrokers, nil, "no seed brokers configured")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	if UsesTLS(cfg) {
		tc, err := tlsfiles.Config(cfg, tlsKeys)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	user, pass := cfg.Get(SettingUser), cfg.Get(SettingPassword)
	switch mech := cfg.Get(SettingSASL); strings.ToLower(mech) {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		return nil, config.Invalid(SettingSASL, mech, "not supported: use plain, scram-sha-256 or scram-sha-512")
	}
	return opts, nil
}

// New connects to the cluster in cfg (seeds, TLS, SASL). Connections are
// made lazily; Setup is the first call that needs the cluster.
func New(_ context.Context, cfg config.Config, opts brokers.Options) (*Broker, error) {
	return NewAs(Name, cfg, opts)
}

// NewAs is New for a driver built on this one (kafka-share): its errors
// and Name carry name.
func NewAs(name string, cfg config.Config, opts brokers.Options) (*Broker, error) {
	s, err := parseOptions(name, opts)
	if err != nil {
		return nil, err
	}
	base, err := ClientOpts(cfg)
	if err != nil {
		return nil, err
	}
	s.acks = cfg.Get(SettingAcks)
	b, err := newBroker(name, base, s, nil)
	if err != nil {
		return nil, err
	}
	b.cfg = cfg
	return b, nil
}

// NewEmbedded starts an in-process kfake cluster (one node, random port)
// and returns the same driver against it. It is for quick functional runs
// with no broker installed and is not a performance target: kfake keeps
// everything in memory in one goroutine and behaves like no real Kafka.
func NewEmbedded(_ context.Context, opts brokers.Options) (*Broker, error) {
	return NewEmbeddedAs(EmbeddedName, opts)
}

// NewEmbeddedAs is NewEmbedded for a driver built on this one, named
// name (its tests run on kfake).
func NewEmbeddedAs(name string, opts brokers.Options) (*Broker, error) {
	s, err := parseOptions(name, opts)
	if err != nil {
		return nil, err
	}
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, fmt.Errorf("%s: start in-process cluster: %w", name, err)
	}
	b, err := newBroker(name, []kgo.Opt{kgo.SeedBrokers(fake.ListenAddrs()...)}, s, fake)
	if err != nil {
		fake.Close()
		return nil, err
	}
	return b, nil
}

func newBroker(name string, base []kgo.Opt, s settings, fake *kfake.Cluster) (*Broker, error) {
	base = append(base,
		kgo.ClientID("inboxbench"),
		kgo.DialTimeout(5*time.Second),
		// Bound every retried request, so a dead cluster surfaces as an
		// error instead of an endless retry loop.
		kgo.RetryTimeout(30*time.Second),
	)
	acks := []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())} // idempotence needs acks=all; explicit because it is a contract
	if s.acks == AcksLeader {
		acks = []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}
	}
	prod, err := kgo.NewClient(append(append(base[:len(base):len(base)], acks...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.RecordDeliveryTimeout(s.deliveryTimeout),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(s.window),
		kgo.ProducerBatchCompression(codecs[s.compression]),
	)...)
	if err != nil {
		return nil, fmt.Errorf("%s: create producer: %w", name, err)
	}
	b := &Broker{
		name:           name,
		acks:           s.acks,
		base:           base,
		rf:             s.rf,
		commitInterval: s.commitInterval,
		fake:           fake,
		prod:           prod,
		adm:            kadm.NewClient(prod),
		calls:          driverutil.Calls{Driver: name},
	}
	b.subs = driverutil.NewSubs[*subscription](&b.mu)
	return b, nil
}

// Name implements brokers.Broker.
func (b *Broker) Name() string { return b.name }

// Capabilities implements brokers.Broker.
func (b *Broker) Capabilities() brokers.Capabilities {
	c := brokers.Capabilities{
		PerKeyOrder:    true,
		ConsumerGroups: true,
		Transactions:   true,
		DeadLetter:     true,
		// An outside consumer bootstraps at the proxied listener, which
		// advertises the proxy (outside.go).
		OutsideProxied: b.cfg.Get(SettingOutsideListener) != "",
		Description: "Kafka via franz-go: key-hashed partitions (murmur2), idempotent producer acks=all, " +
			"one worker per partition, manual commits of finished offsets only, retry in place, " +
			"Reject → <topic>.dlq, no redelivered flag",
	}
	if b.fake != nil {
		c.NotPerformanceTarget = true
		c.InProcess, c.OutsideProxied = true, false
		c.Description = "in-process kfake cluster — not a performance target; " + c.Description
	}
	return c
}

// errorf prefixes the driver's name; an error among args that is the
// brokers refusing the connection settings (TLS, SASL, ACLs) is
// explained, naming the setting to change.
func (b *Broker) errorf(format string, args ...any) error {
	if b.fake == nil {
		for i, a := range args {
			if err, ok := a.(error); ok {
				args[i] = Explain(b.cfg, err)
			}
		}
	}
	return fmt.Errorf(b.name+": "+format, args...)
}

// Setup creates topic and topic.dlq with shards partitions and waits until
// every partition has a leader. Record timestamps are LogAppendTime, so
// Delivery.BrokerTime is the broker's clock.
func (b *Broker) Setup(ctx context.Context, topic string, shards int) error {
	if shards < 1 {
		return b.errorf("setup %s: shards must be at least 1, got %d", topic, shards)
	}
	logAppend := "LogAppendTime"
	configs := map[string]*string{"message.timestamp.type": &logAppend}
	for _, t := range []string{topic, topic + DLQSuffix} {
		resp, err := b.adm.CreateTopic(ctx, int32(shards), b.rf, configs, t)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return b.errorf("create topic %s: %w", t, err)
		}
	}
	for {
		details, err := b.adm.ListTopics(ctx, topic, topic+DLQSuffix)
		if err == nil {
			var permanent bool
			if permanent, err = ready(details, shards); err == nil {
				return nil
			} else if permanent {
				return b.errorf("setup %s: %w", topic, err)
			}
		}
		select {
		case <-ctx.Done():
			return b.errorf("setup %s: topic not ready: %w (last: %v)", topic, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ready reports whether every listed topic exists with shards partitions,
// each with a leader; permanent marks errors that waiting cannot fix.
func ready(details kadm.TopicDetails, shards int) (permanent bool, err error) {
	for name, d := range details {
		if d.Err != nil {
			return false, fmt.Errorf("topic %s: %w", name, d.Err)
		}
		if len(d.Partitions) != shards {
			return true, fmt.Errorf("topic %s exists with %d partitions but the workload asks for %d: delete it or use another topic name", name, len(d.Partitions), shards)
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false, fmt.Errorf("topic %s partition %d has no leader yet", name, p.Partition)
			}
		}
	}
	return false, nil
}

// record is the record Publish sends for m: its key, the body as value,
// and its id and headers as record headers.
func record(topic string, m brokers.Message) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: []byte(m.Key), Value: m.Body}
	r.Headers = append(make([]kgo.RecordHeader, 0, len(m.Headers)+1), kgo.RecordHeader{Key: headerID, Value: []byte(m.ID)})
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

// RecordBytes is the bytes of key, value and headers (names and values)
// of the record Publish sends for m: what a record of m weighs on the
// broker and the wire, besides the record's fixed framing. `bench
// calibrate` gives the vendor tools' key-less, header-less records this
// size, so both sides move the same bytes per record.
func RecordBytes(m brokers.Message) int {
	r := record("", m)
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Publish implements brokers.Broker: PublishAsync and a wait.
func (b *Broker) Publish(ctx context.Context, topic string, msgs []brokers.Message) []error {
	return brokers.PublishWait(ctx, b, topic, msgs)
}

// PublishAsync implements brokers.AsyncPublisher: each record is handed to
// the producer's buffer (kgo's Produce with a promise), which blocks while
// OptPublishWindow records are buffered or in flight. The idempotent
// producer keeps a partition's records in the order they were produced,
// so one key's records keep slice and call order. The promises, and so
// done, run on the producer's promise goroutine.
func (b *Broker) PublishAsync(ctx context.Context, topic string, msgs []brokers.Message, done func([]error)) {
	p := b.calls.Start(ctx, topic, msgs, done)
	if p == nil {
		return
	}
	for i, m := range msgs {
		if ctx.Err() != nil {
			break // the call failed what is not handed over yet
		}
		b.prod.Produce(ctx, record(topic, m), func(_ *kgo.Record, err error) {
			if err != nil {
				err = b.errorf("publish %s to %s: %w", msgs[i].ID, topic, err)
			}
			p.Settle(i, err)
		})
	}
}

// Close implements brokers.Broker.
func (b *Broker) Close() error {
	first, err := b.subs.Close(nil)
	if !first {
		return nil
	}
	errs := []error{err}
	if !closeBounded(b.prod) {
		errs = append(errs, b.errorf("producer did not close within 15s (unreachable cluster?)"))
	}
	// Closing the producer failed what it held; wait for those dones.
	b.calls.Close(errors.New("broker is closed"), 5*time.Second)
	if b.fake != nil {
		b.fake.Close()
	}
	return errors.Join(errs...)
}

// closeBounded closes a client, giving up waiting after 15s: with a dead
// cluster kgo's Close can wait for retries, and a caller must not hang.
func closeBounded(cl *kgo.Client) bool {
	done := make(chan struct{})
	go func() { cl.Close(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(closeTimeout):
		return false
	}
}

// DeadLetters implements brokers.DeadLetterReader by reading topic.dlq
// from the beginning without a group (nothing is committed or removed).
func (b *Broker) DeadLetters(ctx context.Context, topic string, want int) ([]brokers.Message, error) {
	cl, err := kgo.NewClient(append(b.base[:len(b.base):len(b.base)],
		kgo.ConsumeTopics(topic+DLQSuffix),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return nil, b.errorf("read dead letters of %s: %w", topic, err)
	}
	defer closeBounded(cl)
	var out []brokers.Message
	for len(out) < want {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, b.errorf("read dead letters of %s: got %d of %d: %w", topic, len(out), want, ctx.Err())
		}
		f.EachRecord(func(r *kgo.Record) { out = append(out, message(r)) })
	}
	return out, nil
}

// message rebuilds the published Message from a record.
func message(r *kgo.Record) brokers.Message {
	m := brokers.Message{Key: string(r.Key), Body: r.Value}
	for _, h := range r.Headers {
		switch {
		case h.Key == headerID:
			m.ID = string(h.Value)
		case strings.HasPrefix(h.Key, "ib-"):
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[h.Key] = string(h.Value)
		}
	}
	return m
}

// transportID is "<topic>/<partition>@<offset>": the partition's
// transportPrefix and the offset, in one allocation (it runs once per
// delivered record).
func transportID(prefix string, offset int64) string {
	var b strings.Builder
	b.Grow(len(prefix) + 20)
	b.WriteString(prefix)
	var n [20]byte
	b.Write(strconv.AppendInt(n[:0], offset, 10))
	return b.String()
}

// transportPrefix is what the transport ids of a partition's records
// start with: "<topic>/<partition>@".
func transportPrefix(topic string, p int32) string {
	return topic + "/" + strconv.Itoa(int(p)) + "@"
}

// DeleteTopic implements brokers.TopicDeleter.
func (b *Broker) DeleteTopic(ctx context.Context, topic string) error {
	resps, err := b.adm.DeleteTopics(ctx, topic, topic+DLQSuffix)
	if err != nil {
		return b.errorf("delete topic %s: %w", topic, err)
	}
	for _, r := range resps {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return b.errorf("delete topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// StopEmbeddedForTest stops the in-process cluster of a kafka-embedded
// instance while the driver stays open, so tests can check that a dead
// broker yields errors, not hangs. It does nothing for "kafka".
func (b *Broker) StopEmbeddedForTest() {
	if b.fake != nil {
		b.fake.Close()
	}
}
