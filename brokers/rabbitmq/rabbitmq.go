// Package rabbitmq is the RabbitMQ driver (amqp091-go), registered as
// "rabbitmq".
//
// Topology per topic: durable quorum queues "<topic>.0" … "<topic>.<N-1>"
// (classic queues with rabbitmq.queue-type=classic), each with
// single-active-consumer, and a dead-letter queue of the same type
// "<topic>.dlq" fed by the shard queues' dead-letter settings (default
// exchange, at-least-once dead-lettering). Publishing goes through the
// default exchange with the routing key of the shard queue; the driver
// hashes the ordering key onto a shard (FNV-1a), so one key always lands in
// one queue. Messages are persistent and mandatory (unless
// rabbitmq.mandatory=false).
//
// Publishing: each shard queue has a confirm-mode channel of its own, so a
// queue's messages reach it in hand-over order whichever goroutine calls.
// PublishAsync writes each message on its queue's channel, or queues it
// behind the write under way there (so a caller never waits for another's
// write), blocking only while OptPublishWindow of that queue's messages
// are unconfirmed (a confirm window, as PerfTest's --confirm); a
// collector goroutine per channel settles the confirms as they come, in
// publish order, matches each
// basic.return to its message (by message id, oldest first: the broker
// sends a return before the message's ack), and enforces
// OptConfirmTimeout on the oldest unconfirmed message: past it the
// publishing connection is closed and its unconfirmed messages fail, naming
// the resource alarm when the broker had blocked the connection (see
// ErrBlocked). A message the broker returns as unroutable is an error, not
// a silent drop. Publish is PublishAsync and a wait.
//
// Ordering: single-active-consumer means one consumer per queue at a time,
// and the driver handles a queue's deliveries in order (one channel and one
// goroutine per queue). Acks are manual, only after the Handler returned
// Ack.
//
// Batches: the queue's goroutine waits for one delivery, then takes what
// the broker already sent (buffered, never waited for) up to MaxBatch.
// The Ack prefix of a batch is acknowledged with one basic.ack
// multiple=true up to its last acked tag — safe because the channel
// belongs to this queue alone and everything before the batch is already
// settled — after rejected deliveries were nacked one by one.
//
// Retry: a nacked-and-requeued message goes to the back of a quorum queue,
// which would let later messages of the same key overtake it. So Retry is
// done in place: the goroutine keeps the deliveries from the first Retry
// on, backs off and calls the Handler again with them; later deliveries of
// that queue wait (prefetched, unacked).
//
// Reject: basic.nack(requeue=false) dead-letters the message into
// "<topic>.dlq" (x-death records why); counted in Stats.DeadLettered.
//
// Crash: the subscription's connection (and with it every channel) is
// closed without acking anything of the batch; the broker requeues every unacked
// delivery and the next consumer sees it with redelivered=true and a
// quorum-queue x-delivery-count.
//
// BrokerTime: RabbitMQ stores no broker timestamp (without the
// message_timestamp plugin) and the AMQP timestamp property has one-second
// resolution, so the publisher's send time travels in header "ib-sent"
// (unix nanoseconds) and is reported as BrokerTime.
//
// Consumer groups are not modelled: every subscription of a topic competes
// for the same shard queues (single-active-consumer picks one per queue),
// whatever its group name.
//
// Clusters: rabbitmq.url may list the nodes of one cluster. A connection
// goes to the node that last answered, or to the next one when it refuses
// or does not finish the handshake within a second (several attempts run
// at once; the first connection made wins). When the publishing
// connection is lost, its unconfirmed messages fail (the caller sends them
// again with the same id: the inbox deduplicates) and the next publish
// connects again. A subscription outlives its connection: its running
// Handler calls finish (their acks fail with the connection, so what they
// finished is redelivered), the connection is closed, and it consumes
// again from a node that answers, for up to two minutes; single active
// consumer keeps one consumer per queue throughout. Heartbeats every 5 s
// give up a silent (paused) node after 15 s. The queues' type
// (rabbitmq.queue-type), the quorum queues' members
// (rabbitmq.quorum-size) and the mandatory flag (rabbitmq.mandatory) are
// settings; brokers/README.md says what each does on a failover.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// Name is the driver name.
const Name = "rabbitmq"

// What every published message carries besides its id (AMQP message-id),
// body and the caller's headers. `bench calibrate` gives PerfTest's
// messages the same, so both sides send the same shape: each header is
// parsed by the broker on every publish and costs it a few percent of its
// rate.
const (
	HeaderKey   = "ib-key"                       // the ordering key
	HeaderSent  = "ib-sent"                      // publisher send time, unix ns, as a decimal string
	ContentType = "application/cloudevents+json" // the envelope's media type
)

// DLQSuffix names the dead-letter queue: "<topic>.dlq".
const DLQSuffix = ".dlq"

// Option keys accepted in brokers.Options.
const (
	// OptPublishWindow bounds the unconfirmed messages per shard queue:
	// each queue has a confirm-mode channel of its own, and PublishAsync
	// blocks while this many of the queue's messages wait for their
	// confirms (a confirm window, as PerfTest's --confirm; default
	// DefaultPublishWindow).
	OptPublishWindow = brokers.OptPublishWindow
	// OptConfirmTimeout bounds how long a message may take from its
	// hand-over to its confirm (Go duration; default 30s, 10s with
	// several node URLs). Past it the publishing connection is closed and
	// its unconfirmed messages fail, naming the resource alarm when the
	// broker had blocked the connection; the next connection may go to
	// another node.
	OptConfirmTimeout = "confirm-timeout"
)

// DefaultPublishWindow is OptPublishWindow's default.
const DefaultPublishWindow = 256

// DefaultConfirmTimeout is OptConfirmTimeout's default with one node URL.
const DefaultConfirmTimeout = 30 * time.Second

// ClusterConfirmTimeout is OptConfirmTimeout's default with several node
// URLs. A quorum queue whose leader's node is paused (a zombie) stalls
// the channels that published to it: once the other nodes declared it
// down (net_ticktime) and elected another leader, a new channel's
// messages are confirmed, while the old channel's wait until the node
// comes back (measured on RabbitMQ 3.10, docs/measurements.md). Giving
// up the connection sooner bounds that stall.
const ClusterConfirmTimeout = 10 * time.Second

// ErrBlocked marks a publish that timed out while the broker blocked the
// publishing connection (connection.blocked: a memory or disk alarm).
var ErrBlocked = errors.New("RabbitMQ blocked the connection")

const (
	dialTimeout  = 10 * time.Second
	closeTimeout = 5 * time.Second
)

func init() {
	brokers.Register(Name, brokers.Constructor(New), brokers.Info{Service: "rabbitmq", Module: "github.com/rabbitmq/amqp091-go"})
}

// Broker is the RabbitMQ driver.
type Broker struct {
	cfg config.Config // the URL(s), TLS files and SASL mechanism (dial.go)
	// urls are the nodes of one cluster (SettingURL); a connection goes to
	// the one at prefer first, the last one a connection was made to.
	urls           []string
	prefer         atomic.Int32
	queueType      string       // SettingQueueType
	quorumSize     int          // SettingQuorumSize; 0: the cluster's default
	mandatory      bool         // SettingMandatory
	reconnects     atomic.Int64 // subscriptions' sessions opened after one was lost
	window         int
	confirmTimeout time.Duration
	calls          driverutil.Calls

	mu     sync.Mutex
	shards map[string]int
	subs   *driverutil.Subs[*subscription]
	conn   *amqp.Connection       // for publishing and topology; reopened when lost
	pconn  *pubConn               // conn with its confirm-timeout state
	pubs   map[string][]*queuePub // topic → a publisher per shard queue
	// blocked is the reason the broker gave when it blocked conn
	// (connection.blocked), "" while it is not blocked.
	blocked string
}

// New validates the options; connections are opened on first use.
func New(_ context.Context, cfg config.Config, opts brokers.Options) (*Broker, error) {
	if err := brokers.CheckOptions(Name, opts, OptPublishWindow, OptConfirmTimeout); err != nil {
		return nil, err
	}
	confirmTimeout := DefaultConfirmTimeout
	if len(URLs(cfg.Get(SettingURL))) > 1 {
		confirmTimeout = ClusterConfirmTimeout
	}
	if v, ok := opts[OptConfirmTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("rabbitmq: option %s=%q: want a positive Go duration such as 30s", OptConfirmTimeout, v)
		}
		confirmTimeout = d
	}
	n, err := brokers.PublishWindow(Name, opts, DefaultPublishWindow)
	if err != nil {
		return nil, err
	}
	// amqp091 would return a URL that does not parse in its error, with
	// the password; ParseURL's error holds neither (checkURL uses it).
	if err := checkURL(cfg.Get(SettingURL)); err != nil {
		return nil, config.Invalid(SettingURL, nil, "%v", err)
	}
	if _, err := DialConfig(cfg, dialTimeout); err != nil {
		return nil, err
	}
	qt := cfg.Get(SettingQueueType)
	if err := checkQueueType(qt); err != nil {
		return nil, config.Invalid(SettingQueueType, qt, "%v", err)
	}
	size := 0
	if v := cfg.Get(SettingQuorumSize); v != "" {
		if err := checkQuorumSize(v); err != nil {
			return nil, config.Invalid(SettingQuorumSize, v, "%v", err)
		}
		size, _ = strconv.Atoi(v)
	}
	b := &Broker{cfg: cfg, urls: URLs(cfg.Get(SettingURL)), queueType: qt, quorumSize: size, mandatory: cfg.Bool(SettingMandatory),
		window: n, confirmTimeout: confirmTimeout, calls: driverutil.Calls{Driver: Name}, shards: map[string]int{},
		pubs: map[string][]*queuePub{}}
	b.subs = driverutil.NewSubs[*subscription](&b.mu)
	return b, nil
}

// Name implements brokers.Broker.
func (b *Broker) Name() string { return Name }

// Capabilities implements brokers.Broker.
func (b *Broker) Capabilities() brokers.Capabilities {
	return brokers.Capabilities{
		PerKeyOrder:    true,
		RedeliveryFlag: true,
		// Quorum queues count deliveries (x-delivery-count); classic
		// queues only flag a redelivery.
		DeliveryCount:  b.queueType == QueueQuorum,
		DeadLetter:     true,
		OutsideProxied: true, // one address per connection: the proxy's (outside.go)
		Description: "RabbitMQ via amqp091-go: key hashed onto N " + b.queueType + " queues with single-active-consumer, " +
			"publisher confirms, manual acks, retry in place (a requeue would go to the back), " +
			"Reject → <topic>.dlq via dead-lettering, Crash closes the connection unacked",
	}
}

// dial connects to one of the broker's nodes (dialAny), the one that
// answered last first.
func (b *Broker) dial(ctx context.Context, name string) (*amqp.Connection, error) {
	return dialAny(ctx, b.cfg, &b.prefer, name)
}

// connection returns the shared publishing/topology connection, dialling
// it when missing or closed.
func (b *Broker) connection() (*amqp.Connection, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs.Closed() {
		return nil, errors.New("rabbitmq: broker is closed")
	}
	if b.conn != nil && !b.conn.IsClosed() {
		return b.conn, nil
	}
	conn, err := b.dial(context.Background(), "inboxbench-publisher")
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: connect: %w", err)
	}
	b.conn, b.pconn, b.blocked = conn, &pubConn{conn: conn}, ""
	b.watchBlocked(conn)
	return conn, nil
}

// watchBlocked follows connection.blocked/unblocked for conn: RabbitMQ
// stops reading from a publishing connection while a memory or disk alarm
// is on, so nothing it sends is confirmed until the alarm clears.
func (b *Broker) watchBlocked(conn *amqp.Connection) {
	notes := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		for n := range notes {
			b.mu.Lock()
			if b.conn == conn {
				b.blocked = ""
				if n.Active {
					b.blocked = n.Reason
					if b.blocked == "" {
						b.blocked = "no reason given"
					}
				}
			}
			b.mu.Unlock()
		}
	}()
}

// blockedReason is why the broker blocks conn, or "" when it does not.
func (b *Broker) blockedReason(conn *amqp.Connection) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != conn {
		return ""
	}
	return b.blocked
}

// channel opens a short-lived channel for topology work: a failed declare
// closes its channel, so none is shared.
func (b *Broker) channel() (*amqp.Channel, error) {
	conn, err := b.connection()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	return ch, nil
}

func queueName(topic string, shard int) string { return topic + "." + strconv.Itoa(shard) }

// Setup declares the shard queues and the dead-letter queue. Declaring is
// idempotent; a queue that exists with other arguments is an error
// (PRECONDITION_FAILED), and so is a topic that already has more shards.
func (b *Broker) Setup(ctx context.Context, topic string, shards int) error {
	if shards < 1 {
		return fmt.Errorf("rabbitmq: setup %s: shards must be at least 1, got %d", topic, shards)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("rabbitmq: setup %s: %w", topic, ctx.Err())
	}
	if ok, err := b.queueExists(queueName(topic, shards)); err != nil {
		return fmt.Errorf("rabbitmq: setup %s: %w", topic, err)
	} else if ok {
		return fmt.Errorf("rabbitmq: setup %s: queue %s exists, so the topic has more than the %d shards asked for: delete its queues or use another topic name", topic, queueName(topic, shards), shards)
	}
	ch, err := b.channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	dlq := topic + DLQSuffix
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, b.dlqArgs()); err != nil {
		return errorf(b.cfg, "rabbitmq: declare %s: %w", dlq, err)
	}
	for i := 0; i < shards; i++ {
		q := queueName(topic, i)
		_, err := ch.QueueDeclare(q, true, false, false, false, b.shardQueueArgs(topic))
		if err != nil {
			return errorf(b.cfg, "rabbitmq: declare %s: %w", q, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("rabbitmq: setup %s: %w", topic, ctx.Err())
		}
	}
	b.mu.Lock()
	b.shards[topic] = shards
	b.mu.Unlock()
	return nil
}

// shardQueueArgs are the arguments of every shard queue of topic.
func (b *Broker) shardQueueArgs(topic string) amqp.Table {
	args := amqp.Table{
		"x-queue-type":              b.queueType,
		"x-single-active-consumer":  true,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": topic + DLQSuffix,
		"x-overflow":                "reject-publish",
	}
	if b.queueType == QueueQuorum {
		// at-least-once dead-lettering keeps a rejected message until
		// the DLQ confirmed it; it requires reject-publish overflow.
		args["x-dead-letter-strategy"] = "at-least-once"
		b.sizeArg(args)
	}
	return args
}

// dlqArgs are the dead-letter queue's arguments: the shard queues' type.
func (b *Broker) dlqArgs() amqp.Table {
	args := amqp.Table{"x-queue-type": b.queueType}
	if b.queueType == QueueQuorum {
		b.sizeArg(args)
	}
	return args
}

// sizeArg declares the quorum queue's members when SettingQuorumSize
// asks for a number: RabbitMQ then refuses a redeclare with another one,
// which is how Durability verifies it.
func (b *Broker) sizeArg(args amqp.Table) {
	if b.quorumSize > 0 {
		args["x-quorum-initial-group-size"] = int32(b.quorumSize)
	}
}

func (b *Broker) queueExists(q string) (bool, error) {
	ch, err := b.channel()
	if err != nil {
		return false, err
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false, nil
	}
	if err != nil {
		return false, errorf(b.cfg, "check queue %s: %w", q, err)
	}
	return true, nil
}

// shardCount returns the topic's shard count: from Setup in this process,
// or else by probing "<topic>.0", "<topic>.1", … (so another process can
// publish or consume a topic it did not set up).
func (b *Broker) shardCount(topic string) (int, error) {
	return driverutil.CachedShards(&b.mu, b.shards, topic, func() (int, error) {
		n := 0
		for ; n < 4096; n++ {
			ok, err := b.queueExists(queueName(topic, n))
			if err != nil {
				return 0, fmt.Errorf("rabbitmq: find shards of %s: %w", topic, err)
			}
			if !ok {
				break
			}
		}
		if n == 0 {
			return 0, fmt.Errorf("rabbitmq: topic %s has no queues (%s missing): run Setup first", topic, queueName(topic, 0))
		}
		return n, nil
	})
}

// Publish implements brokers.Broker: PublishAsync and a wait.
func (b *Broker) Publish(ctx context.Context, topic string, msgs []brokers.Message) []error {
	return brokers.PublishWait(ctx, b, topic, msgs)
}

// PublishAsync implements brokers.AsyncPublisher: each message is written
// on its shard queue's confirm channel, or queued behind the write under
// way there, blocking while OptPublishWindow of that queue's messages are
// unconfirmed; the channel's collector settles them (and runs done) as
// the confirms come, in order.
func (b *Broker) PublishAsync(ctx context.Context, topic string, msgs []brokers.Message, done func([]error)) {
	queues := func() ([]*queuePub, error) { return b.publishers(topic) }
	driverutil.Spread(ctx, b.calls.Start(ctx, topic, msgs, done), queues)
}

// Close implements brokers.Broker.
func (b *Broker) Close() error {
	var conn *amqp.Connection
	var pubs map[string][]*queuePub
	first, err := b.subs.Close(func() {
		conn, pubs = b.conn, b.pubs
		b.pubs = map[string][]*queuePub{}
	})
	if !first {
		return nil
	}
	errs := []error{err}
	// The connection first, with a deadline: a blocked connection (resource
	// alarm) answers no close, and closing it closes its channels.
	if conn != nil && !conn.IsClosed() {
		if err := conn.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) && b.blockedReason(conn) == "" {
			errs = append(errs, fmt.Errorf("rabbitmq: close connection: %w", err))
		}
	}
	for _, qs := range pubs {
		for _, q := range qs {
			q.close()
		}
	}
	// Closing the connection failed what its channels held; wait for
	// those dones.
	b.calls.Close(errors.New("broker is closed"), 5*time.Second)
	return errors.Join(errs...)
}
