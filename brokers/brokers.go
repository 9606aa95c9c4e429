// Package brokers is the driver interface every message broker implements
// for inboxbench, and the registry the drivers add themselves to.
//
// The interface is deliberately small (go-ycsb / OpenMessaging Benchmark
// size): create a topic with N shards, publish a batch with per-message
// publisher confirmation, subscribe with a handler whose return values are
// the acknowledgements (benthos' "ack as a value"), close. What differs between
// brokers is declared in Capabilities, which the conformance suite
// (brokers/brokertest) and the runner read instead of guessing.
//
// This package knows nothing of PostgreSQL or the inbox: a Handler is where
// the caller's transaction runs — one per batch of one shard's deliveries
// if it likes (SubscribeOptions.MaxBatch) — and the driver acknowledges
// only what the Handler's Verdicts say, only after the Handler returned.
//
// Drivers register by name from their init(), with what callers must know
// before opening one (Info: the stack service the broker runs as, the
// client library):
//
//	func init() { brokers.Register("kafka", brokers.Constructor(New), brokers.Info{Service: "kafka", Module: "github.com/twmb/franz-go"}) }
//
// and cmd/bench blank-imports brokers/all, which imports every driver.
package brokers

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/config"
)

// Message is what a producer hands to Publish.
type Message struct {
	// Key is the ordering key (the aggregate id). Messages with equal keys go
	// to the same shard and, when the driver claims PerKeyOrder, are
	// delivered in publish order.
	Key string
	// ID is the event identity as a string. It travels as the broker's own
	// message id where there is one (AMQP message-id, RocketMQ keys) or as a
	// header (Kafka), and it is the same on every resend of the same event.
	// It is not the transport id of a delivery.
	ID string
	// Headers are application headers, delivered unchanged. Names starting
	// with "ib-" are reserved for the drivers.
	Headers map[string]string
	// Body is the envelope (envelope.Marshal output); drivers never look inside.
	Body []byte
}

// Delivery is one delivery of a Message to a Handler.
type Delivery struct {
	Message
	// Redelivered is the broker's redelivery flag (AMQP redelivered). Only
	// meaningful when Capabilities.RedeliveryFlag.
	Redelivered bool
	// DeliveryCount is how often this message has been delivered, this
	// delivery included, as the client library reports it: quorum queue
	// x-delivery-count + 1 (RabbitMQ, survives consumer crashes); 0 when
	// unknown (Kafka, RocketMQ). Trust it across crashes only when
	// Capabilities.DeliveryCount.
	DeliveryCount int
	// Attempt counts Handler calls for this delivery within this
	// subscription: 1 on the first call, +1 for each in-place retry after
	// a Retry verdict (its own, or one for an earlier delivery of its
	// batch).
	Attempt int
	// TransportID identifies this delivery or stored copy for diagnostics
	// (delivery tag, topic/partition@offset, msgId@queue:offset). Never use
	// it for deduplication: a republished event gets a new one.
	TransportID string
	// Shard names the queue/partition the message came from.
	Shard string
	// BrokerTime is the broker's timestamp for the message where the broker
	// keeps one (Kafka LogAppendTime, RocketMQ store time); for RabbitMQ,
	// which stores none, the publisher's send time (see the driver docs).
	BrokerTime time.Time
}

// Verdict is a Handler's answer; the driver obeys it after the Handler
// returned.
type Verdict int

const (
	// Ack: done (the caller's transaction committed, or the event was found
	// already done). The driver acknowledges / commits the offset.
	Ack Verdict = iota
	// Retry: not done, try again later. The message must not be lost and,
	// for drivers with PerKeyOrder, must not be overtaken by later messages
	// of its shard: drivers retry in place after a backoff.
	Retry
	// Reject: poison; never retry. The driver moves the message to its
	// dead-letter destination (Capabilities.DeadLetter) and counts it.
	Reject
	// Crash simulates the process dying: right after the caller's
	// database commit (the article's duplicate experiment), or before it
	// with deliveries in hand (the crash-with-backlog fault,
	// HoldForBacklog). The delivery is left unacknowledged, the
	// subscription's connection/channel/client is torn down without any
	// further ack or offset commit, and the subscription ends with
	// ErrCrashed. The broker redelivers; the caller may Subscribe again.
	Crash
)

// String names the verdict as the logs and results spell it ("ack", …).
func (v Verdict) String() string {
	switch v {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case Reject:
		return "reject"
	case Crash:
		return "crash"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Handler processes deliveries of one shard, in shard order: ds is a batch
// of up to SubscribeOptions.MaxBatch deliveries that were already
// available (a driver never waits to fill a batch), and the result holds
// one verdict per delivery: len(result) must equal len(ds). Batches exist
// so a caller can apply N events in one database transaction; with
// MaxBatch 1 (the default) every call gets exactly one delivery.
//
// The driver obeys the verdicts in order, per delivery:
//   - Ack and Reject before the first Retry are acknowledged /
//     dead-lettered;
//   - from the first Retry on, nothing is acknowledged: after a backoff the
//     Handler is called again with the deliveries from that Retry onward,
//     in the same order (whatever it answered for the later ones), so no
//     later delivery of the shard overtakes the retried one (a driver
//     without PerKeyOrder may instead hand them back to the broker after
//     the backoff, which delivers them again later, DeliveryCount + 1:
//     kafka-share);
//   - if any verdict is Crash, nothing of this call is acknowledged or
//     dead-lettered and the subscription crashes (deliveries acknowledged
//     by earlier calls stay acknowledged).
//
// Handlers for different shards may run concurrently; for one shard they
// run one call at a time, in order, when the driver claims PerKeyOrder. ctx
// is cancelled when the subscription closes or crashes; a Handler should
// then return promptly (its verdicts may be ignored: an unfinished delivery
// is redelivered). A Handler must not keep ds or its elements after it
// returned.
type Handler func(ctx context.Context, ds []*Delivery) []Verdict

// PerDelivery adapts a one-at-a-time function to a Handler: f is called for
// each delivery of a batch in order. It stops at the first verdict other
// than Ack or Reject and answers the same for the rest of the batch, so a
// later delivery is never handled ahead of one that must be retried (and a
// Crash stops the batch where it happened).
func PerDelivery(f func(ctx context.Context, d *Delivery) Verdict) Handler {
	return func(ctx context.Context, ds []*Delivery) []Verdict {
		vs := make([]Verdict, len(ds))
		for i, d := range ds {
			vs[i] = f(ctx, d)
			if vs[i] != Ack && vs[i] != Reject {
				for j := i + 1; j < len(ds); j++ {
					vs[j] = vs[i]
				}
				break
			}
		}
		return vs
	}
}

// ErrDeduplicated is a publish's result when the broker confirmed it
// without storing it: it holds a message with the same ID from within
// its deduplication window (Capabilities.BrokerDedup). The event is
// stored once and this copy is never delivered. It is not a failure:
// FirstError skips it, and a caller counting deliveries must not wait
// for this one.
var ErrDeduplicated = errors.New("dropped by the broker as a duplicate of a stored message with the same id")

// SettingDedupWindow is the deduplication window a driver with
// broker-side deduplication (Capabilities.BrokerDedup) gives the topics
// its Setup creates; empty: the broker's default.
var SettingDedupWindow = config.Register(config.Setting{Key: "broker.dedup-window", Flag: "broker-dedup-window",
	Env: "INBOXBENCH_BROKER_DEDUP_WINDOW", Check: checkWindow,
	Usage: "deduplication window of the topics a driver with broker-side deduplication creates (NATS JetStream's Duplicates: a publish whose id the stream stored within it is dropped); empty: the broker's default (JetStream: 2m)"})

func checkWindow(v string) error {
	if d, err := time.ParseDuration(v); err != nil || d <= 0 {
		return errors.New("want a positive Go duration such as 2m")
	}
	return nil
}

// ErrCrashed is the Subscription error after a Crash verdict.
var ErrCrashed = errors.New("subscription crashed on purpose (Crash verdict): unacked deliveries will be redelivered")

// Capabilities are what a driver guarantees; the conformance suite only
// tests what is claimed, and the runner reports it.
type Capabilities struct {
	// PerKeyOrder: messages of one key are handled in publish order, one at
	// a time, also across Retry verdicts.
	PerKeyOrder bool
	// RedeliveryFlag: a message delivered before (and not acknowledged) is
	// marked Redelivered when it comes back after a Crash.
	RedeliveryFlag bool
	// DeliveryCount: Delivery.DeliveryCount is filled in by the broker.
	DeliveryCount bool
	// ConsumerGroups: subscriptions with different group names each receive
	// every message; subscriptions sharing a group share the work.
	ConsumerGroups bool
	// Transactions: the broker can tie published messages to consumed
	// offsets atomically (Kafka EOS). Informational: no driver uses it,
	// because the inbox's database transaction is the exactly-once scope.
	Transactions bool
	// DeadLetter: Reject moves the message to a dead-letter destination
	// that DeadLetterReader can read back.
	DeadLetter bool
	// NotPerformanceTarget marks drivers that exist for quick functional
	// runs (kafka-embedded): their figures must not be compared.
	NotPerformanceTarget bool
	// Baseline: no transport at all; Publish hands messages straight to
	// the subscribers (none). Such a driver's cells measure the database
	// alone and are the reference every other cell is compared with.
	Baseline bool
	// InProcess: the "broker" lives inside the process that opened it
	// (none, kafka-embedded), so another process cannot consume what this
	// one publishes; worker processes do not apply.
	InProcess bool
	// RedeliveryDelay bounds how long after a consumer crash its unacked
	// deliveries can take to reach another (or a restarted) consumer of
	// the group: 0 when it is immediate. Callers waiting for progress
	// after a crash must wait at least this long before calling it a
	// stall.
	RedeliveryDelay time.Duration
	// BrokerDedup is the window within which the broker itself drops a
	// publish whose Message.ID it stored already (JetStream's
	// Nats-Msg-Id and Duplicates window), reporting ErrDeduplicated for
	// it; 0 when the broker keeps every copy. It covers a producer's
	// quick retry, not a republish after the window nor a consumer's
	// redelivery: the inbox still decides.
	BrokerDedup time.Duration
	// OutsideProxied: a consumer outside the suite (a service under
	// test, brokers.Outside) reaches the broker only through the
	// addresses OutsideEnv routed, so its connections can be cut there.
	OutsideProxied bool
	// Description says in one line what the driver runs against and how it
	// maps ordering, retry, dead-letter and crash.
	Description string
}

// SubscribeOptions tune one subscription. Zero values mean the defaults.
type SubscribeOptions struct {
	// Prefetch bounds unacknowledged deliveries per shard (AMQP basic.qos,
	// Kafka records buffered per partition, RocketMQ messages pulled ahead
	// per queue). Default 64.
	Prefetch int
	// RetryBackoff is the first wait before an in-place retry after a
	// Retry verdict; it doubles per attempt up to MaxRetryBackoff.
	// Default 50ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the backoff. Default 2s.
	MaxRetryBackoff time.Duration
	// MaxBatch is the most deliveries of one shard passed to one Handler
	// call. Drivers never wait to fill a batch: they take the first
	// delivery, then whatever is already buffered, up to MaxBatch.
	// Default 1. Prefetch is raised to at least MaxBatch.
	MaxBatch int
	// SettleOnReceipt is a negative control, for tests only: the driver
	// settles each delivery the moment it receives it from the broker,
	// before the Handler sees it — the transport mistake of a consumer
	// that acknowledges too early (RabbitMQ: basic.ack as the delivery
	// arrives; Kafka: the polled position committed on fetch; RocketMQ:
	// the pulled offset committed on pull). The verdicts then settle
	// nothing more (a Reject is not dead-lettered), and a consumer that
	// dies loses what it had received and not handled. No `bench run`
	// setting reaches it: conform's transport controls (runner.EarlySettle)
	// and the driver suite (brokertest) set it. Every driver with a
	// transport implements it; a baseline without one (none) refuses it.
	SettleOnReceipt bool
}

// WithDefaults returns o with zero fields replaced by the defaults.
func (o SubscribeOptions) WithDefaults() SubscribeOptions {
	if o.Prefetch <= 0 {
		o.Prefetch = 64
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1
	}
	if o.Prefetch < o.MaxBatch {
		// A batch is made of buffered deliveries: fewer could never
		// fill it.
		o.Prefetch = o.MaxBatch
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 50 * time.Millisecond
	}
	if o.MaxRetryBackoff <= 0 {
		o.MaxRetryBackoff = 2 * time.Second
	}
	if o.MaxRetryBackoff < o.RetryBackoff {
		o.MaxRetryBackoff = o.RetryBackoff
	}
	return o
}

// Backoff returns the wait before handler call attempt+1 (attempt ≥ 1).
func (o SubscribeOptions) Backoff(attempt int) time.Duration {
	d := o.RetryBackoff
	for i := 1; i < attempt && d < o.MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, o.MaxRetryBackoff)
}

// Broker is one driver instance: its connections, producer and the
// subscriptions it started. Methods are safe for concurrent use.
type Broker interface {
	// Name is the registry name ("rabbitmq", "kafka", …).
	Name() string
	// Capabilities describes what the driver guarantees.
	Capabilities() Capabilities
	// Setup creates topic (and its dead-letter destination) with shards
	// queues/partitions and returns once it is usable. It is idempotent; an
	// existing topic with another shard count is an error. Publish and
	// Subscribe need Setup to have run in this process for drivers that
	// compute shards client-side (RabbitMQ).
	Setup(ctx context.Context, topic string, shards int) error
	// Publish sends msgs and waits for the broker's confirmation of each.
	// The result has len(msgs) entries; entry i is nil when msgs[i] is
	// durably accepted (ErrDeduplicated: an earlier copy is). Messages
	// of one key are sent in slice order.
	Publish(ctx context.Context, topic string, msgs []Message) []error
	// Subscribe starts consuming topic as group and calls h with batches
	// of deliveries until the subscription is closed, crashes or fails. ctx
	// bounds the start-up only; use Subscription.Close to stop. h may be
	// called before Subscribe returns: a Crash then still yields the
	// Subscription, its Err() ErrCrashed, never an error from Subscribe.
	Subscribe(ctx context.Context, topic, group string, opts SubscribeOptions, h Handler) (Subscription, error)
	// Close closes every subscription and connection of this instance.
	Close() error
}

// AsyncPublisher is implemented by drivers that publish without waiting
// for confirms: every in-tree driver, whose Publish is PublishAsync and a
// wait (PublishWait). A benchmark publisher sends at its intended times
// through it, whatever is still unconfirmed.
type AsyncPublisher interface {
	// PublishAsync sends msgs in slice order and returns once each has
	// been handed to the transport (written to the connection, or queued
	// in the driver's or client's bounded buffer), blocking only while the
	// driver's window of unconfirmed messages is full (its option
	// "publish-window") or until ctx ends; once ctx has ended it hands
	// over nothing more.
	//
	// done is called exactly once, never on the calling goroutine, with
	// len(msgs) errors: entry i is nil when msgs[i] is durably accepted
	// (what a nil from Publish means), ErrDeduplicated when the broker
	// dropped it for an earlier copy it stored, else why not. It is called once
	// every message of the call is confirmed or has failed, or as soon as
	// ctx ends: the messages not confirmed by then get an error wrapping
	// ctx's (they may still reach the broker: a retry must reuse their
	// ids). done runs on a driver goroutine that confirms other messages
	// too: it must return promptly and must not publish itself (start a
	// goroutine for that). Calls of one Broker may complete in any order.
	//
	// Messages of one key sent by successive calls from one goroutine
	// reach the broker in call order; a failed message does not stop the
	// later ones, of its call or of later calls. The caller must not
	// modify msgs (bodies and header maps included) before done is called.
	// After Close, PublishAsync fails every message; Close itself fails
	// what is still unconfirmed and returns after every done of the
	// instance has returned.
	PublishAsync(ctx context.Context, topic string, msgs []Message, done func(errs []error))
}

// PublishWait is Publish on top of PublishAsync: it sends msgs and waits
// for done.
func PublishWait(ctx context.Context, p AsyncPublisher, topic string, msgs []Message) []error {
	ch := make(chan []error, 1)
	p.PublishAsync(ctx, topic, msgs, func(errs []error) { ch <- errs })
	return <-ch
}

// Subscription is a running consumer.
type Subscription interface {
	// Done is closed once the subscription ended (closed, crashed or
	// failed) and no Handler call is running any more.
	Done() <-chan struct{}
	// Err is nil after a clean Close, ErrCrashed after a Crash verdict, or
	// the error that ended the subscription (connection lost, …). Valid
	// after Done is closed.
	Err() error
	// Close stops consuming, waits for running Handler calls, acknowledges
	// what they finished, leaves unfinished deliveries to be redelivered,
	// and releases the connection. Safe to call more than once.
	Close() error
	// Stats returns the subscription's counters so far.
	Stats() Stats
}

// Stats counts what a subscription did; a Reject is never silent.
type Stats struct {
	// Received counts deliveries the driver took from the broker, handed
	// to the Handler or buffered for it (prefetched), each once; with
	// SettleOnReceipt, only those it settled on receipt.
	Received     int64
	Deliveries   int64 // deliveries passed to the Handler, retries included
	Acked        int64
	Retried      int64 // Handler calls answered with a Retry (the batch is retried from there)
	DeadLettered int64 // Reject verdicts moved to the dead-letter destination
	Crashed      int64 // Crash verdicts (0 or 1)
}

// Outstanding is what the subscription holds that the Handler has not
// settled: received, and neither acknowledged nor dead-lettered by a
// verdict (in the Handler's hands or buffered for it; after a lost
// connection or a rebalance it also counts what went back to the broker).
func (s Stats) Outstanding() int64 { return s.Received - s.Acked - s.DeadLettered }

// DeadLetterReader is implemented by drivers with Capabilities.DeadLetter.
type DeadLetterReader interface {
	// DeadLetters returns messages dead-lettered from topic so far, waiting
	// until at least want have arrived or ctx ends (then it returns what it
	// has with ctx's error). RabbitMQ removes what it returns from the DLQ;
	// Kafka and RocketMQ read their dead-letter topics from the beginning.
	DeadLetters(ctx context.Context, topic string, want int) ([]Message, error)
}

// TopicDeleter is implemented by drivers that can remove a topic and its
// dead-letter destination (tests clean up with it; runs may too).
type TopicDeleter interface {
	// DeleteTopic deletes topic's queues/partitions and dead-letter
	// destination, with their messages. Deleting a missing topic is not an
	// error.
	DeleteTopic(ctx context.Context, topic string) error
}

// FirstError returns the first non-nil error of a Publish result, wrapped
// with how many of the batch failed; nil when all succeeded (a message
// the broker dropped as a duplicate, ErrDeduplicated, succeeded).
func FirstError(errs []error) error {
	var first error
	n := 0
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrDeduplicated) {
			n++
			if first == nil {
				first = err
			}
		}
	}
	if first == nil {
		return nil
	}
	return fmt.Errorf("%d of %d messages not confirmed, first: %w", n, len(errs), first)
}

// Counters is a Stats implementation for drivers: atomic, no locks on the
// hot path.
type Counters struct {
	received, deliveries, acked, retried, deadLettered, crashed atomic.Int64
}

// Received counts n deliveries taken from the broker.
func (c *Counters) Received(n int) { c.received.Add(int64(n)) }

// Delivered counts a delivery passed to the Handler.
func (c *Counters) Delivered() { c.deliveries.Add(1) }

// Acked counts an acknowledged delivery.
func (c *Counters) Acked() { c.acked.Add(1) }

// Retried counts a Handler call answered with a Retry.
func (c *Counters) Retried() { c.retried.Add(1) }

// DeadLettered counts a Reject moved to the dead-letter destination.
func (c *Counters) DeadLettered() { c.deadLettered.Add(1) }

// Crashed counts a Crash verdict.
func (c *Counters) Crashed() { c.crashed.Add(1) }

// Stats returns a snapshot.
func (c *Counters) Stats() Stats {
	return Stats{
		Received:     c.received.Load(),
		Deliveries:   c.deliveries.Load(),
		Acked:        c.acked.Load(),
		Retried:      c.retried.Load(),
		DeadLettered: c.deadLettered.Load(),
		Crashed:      c.crashed.Load(),
	}
}

// CheckOptions returns an error naming the first key of opts that is not
// in known, for drivers validating their Options.
func CheckOptions(driver string, opts Options, known ...string) error {
	for k := range opts {
		ok := false
		for _, kk := range known {
			if k == kk {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("%s: unknown option %q: accepted are %v", driver, k, known)
		}
	}
	return nil
}
