// Package rocketmq is the RocketMQ driver (classic remoting protocol),
// registered as "rocketmq". It speaks the remoting protocol itself over
// connections it dials (Remoting: TLS verified as configured, every
// request signed by the access key): the sends (producer.go, the
// requests of apache/rocketmq-client-go/v2's producer, whose message
// types and batch encoding it uses), topic creation and deletion
// (admin.go), routes, and an orderly consumer of its own (worker.go,
// group.go, conn.go). The library's own connections cannot verify a
// server (its TLS skips verification and offers no client certificate),
// and its admin client neither signs nor reads the answer to a topic
// creation.
//
// Publishing: a message goes to the queue its ordering key hashes to
// (FNV-1a over the topic's write queues, as the client's hash selector
// computes), so a key always lands in one queue. Each queue has a sender
// goroutine with one request in flight: PublishAsync puts a message in
// its queue's buffer (blocking while OptPublishWindow of the queue's
// messages are unconfirmed), and the sender sends everything buffered as
// one batch send (one request and one confirmation per up to 1 MiB of
// messages), waits for the confirmation, then sends what came meanwhile;
// queues go in parallel. Per-key order holds because a key's messages
// share a queue and a queue's batches go one after another, never two at
// once (the broker may store two requests in flight on one queue in
// either order). A failed batch fails its messages only. A send the
// broker refuses as busy (SYSTEM_BUSY: it dropped the request from its
// send queue unprocessed) is sent again after a pause, for up to the send
// timeout, before anything later of its queue. Publish is PublishAsync and
// a wait.
//
// Why not the client's orderly push consumer (in short: it stalls for
// seconds whenever queues move, and races): brokers/README.md, "RocketMQ:
// which client path, and why (measured)".
//
// Consuming: every subscription is a member of the group (heartbeats to
// every master broker of the topic). Once a second (every 200 ms while it
// waits for a queue another member still holds), or at once when a broker
// says the membership changed, it reads the member list, takes its
// share of the topic's queues (the split of AllocateMessageQueueAveragely)
// and locks them on the broker — the lock, renewed each round, is what
// makes one member at a time consume a queue. A queue it no longer owns is
// handed back cleanly: its worker stops after the running Handler call,
// the finished offset is committed, then the queue is unlocked, so the
// next owner starts where it left off within a round. A queue the broker
// no longer grants is dropped at once, and so is one whose lock was not
// renewed for 5 s (lockLease, shorter than the broker's lockMaxLiveTime:
// 60 s by default, 6 s on the local stack; a broker that fails or does
// not answer the renewals): its worker stops, so no Handler call starts
// without the lock (an in-place retry of the batch in hand included),
// nothing more is committed or unlocked, and the queue is locked afresh
// and consumed from its committed offset once the broker grants it.
//
// Each held queue has a worker: a puller keeps about Prefetch messages
// buffered (pulls of up to 32 messages, the broker's default cap; a pull
// that finds nothing waits at the broker, which answers when a message
// arrives), and the handler loop passes up to MaxBatch buffered messages
// (it never waits to fill a batch) to one Handler call. Verdicts are
// obeyed as brokers.Handler documents, through driverutil.HandleBatch, as
// the Kafka driver does: the Ack/Reject prefix before the first Retry is
// settled, the deliveries from the Retry on are held in place and handed
// to the Handler again after the backoff (Attempt counts the calls), so
// nothing of the queue overtakes them. Settled offsets are committed to
// the broker every round and when a queue is handed back or the
// subscription closes.
//
// Reject: the driver publishes the message to "<topic>-DLQ" (created by
// Setup; same key, properties, ib-dlq-source) and then settles it; counted
// in Stats.DeadLettered. If the dead-letter send fails, the subscription
// ends with that error and the message, not settled, goes to the next
// consumer.
//
// Crash: nothing of the crashing Handler call is settled and nothing more
// is committed; the subscription unlocks its queues and leaves the group
// on the way out (a real crash holds the locks until lockMaxLiveTime), and
// the next member starts from the last committed offset, so what was
// settled in the last second comes again too. There is no redelivered
// flag (ReconsumeTimes stays 0: the broker never learns of a local
// attempt); the same msgId and queue offset are the evidence.
//
// Topics are created (UPDATE_AND_CREATE_TOPIC) on every broker found in
// the name server's cluster info, slaves included (or the brokers given
// as option "broker-addrs"), and Setup returns only once a route query
// shows the queues; a refusal (authentication, a missing permission)
// ends it at once, explained (Explain).
//
// A master switch (controller mode): a send that fails for anything but
// a busy broker, a flush or slave timeout or a refused setting fetches
// the topic's route again, so its next attempt goes to the master the
// name server routes now; the consumer fetches its route again after any
// failed call to a broker, locks its queues on the new master and moves
// each worker there, committing the worker's finished offset to the new
// master first. A slave that became master has the topic (created on
// every broker) and the consumer offsets it copied from the master (every
// 10 s): what was settled since is delivered again. The client library logs only errors unless
// option "log-level" says otherwise (the setting is process-wide: it is
// the library's own global); the consumer logs a failure it retries
// (broker unreachable) at most once per 10 s per subscription.
package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// Name is the driver name.
const Name = "rocketmq"

// DLQSuffix names the dead-letter topic: "<topic>-DLQ" (RocketMQ topic
// names allow no dots).
const DLQSuffix = "-DLQ"

// Reserved message properties.
const (
	propID         = "ib-id"         // Message.ID (also in KEYS, for the console's key search)
	propSource     = "ib-dlq-source" // transport id a DLQ copy came from
	propHeaderPref = "ib-h-"         // user headers, prefixed to keep them apart from system properties
)

// Option keys accepted in brokers.Options.
const (
	// OptBrokerAddrs: comma-separated master broker addresses for topic
	// creation; default: discovered from the name server's cluster info.
	OptBrokerAddrs = "broker-addrs"
	// OptLogLevel of the client library: debug, info, warn, error (default)
	// or fatal. Process-wide.
	OptLogLevel = "log-level"
	// OptSendTimeout bounds one send (Go duration, default 10s).
	OptSendTimeout = "send-timeout"
	// OptPublishWindow bounds the messages per queue handed to
	// PublishAsync and not yet confirmed: each queue's sender has one
	// batch send in flight and buffers what comes meanwhile, and
	// PublishAsync blocks while this many of the queue's messages are
	// buffered or in flight (default DefaultPublishWindow).
	OptPublishWindow = brokers.OptPublishWindow
)

// DefaultPublishWindow is OptPublishWindow's default.
const DefaultPublishWindow = 256

const rpcTimeout = 10 * time.Second

func init() {
	brokers.Register(Name, brokers.Constructor(New), brokers.Info{Service: "rocketmq", Module: "github.com/apache/rocketmq-client-go/v2"})
}

// Broker is the RocketMQ driver.
type Broker struct {
	namesrv     []string
	rm          *Remoting // TLS and signing of every request
	brokerAddrs []string  // from options; else discovered in Setup
	sendTimeout time.Duration
	window      int
	calls       driverutil.Calls
	sending     sync.WaitGroup // the queue senders (publish.go)
	instance    string
	seq         atomic.Int64
	topics      sync.Map // topic → *topicState, see publish.go

	prodOnce sync.Once
	prod     producerAPI
	prodErr  error

	mu   sync.Mutex // guards subs and the start of senders and of the producer
	subs *driverutil.Subs[*subscription]
}

// producerAPI is how the driver sends (remotingProducer; a fake in
// tests).
type producerAPI interface {
	SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error)
	Shutdown() error
}

// New validates options and quiets the client's logger; connections are
// made on first use.
func New(_ context.Context, cfg config.Config, opts brokers.Options) (*Broker, error) {
	if err := brokers.CheckOptions(Name, opts, OptBrokerAddrs, OptLogLevel, OptSendTimeout, OptPublishWindow); err != nil {
		return nil, err
	}
	if len(cfg.List(SettingNamesrv)) == 0 {
		return nil, config.Invalid(SettingNamesrv, nil, "no name server configured")
	}
	// The client logs routine teardown (and the chatter of goroutines that
	// outlive Shutdown) at error level; the driver reports real failures
	// itself, so the library stays silent unless asked.
	level := "fatal"
	if v, ok := opts[OptLogLevel]; ok {
		switch v {
		case "debug", "info", "warn", "error", "fatal":
			level = v
		default:
			return nil, fmt.Errorf("rocketmq: option %s=%q: want debug, info, warn, error or fatal", OptLogLevel, v)
		}
	}
	rlog.SetLogLevel(level)
	rm, err := NewRemoting(cfg)
	if err != nil {
		return nil, err
	}
	b := &Broker{
		namesrv:     cfg.List(SettingNamesrv),
		rm:          rm,
		sendTimeout: 10 * time.Second,
		window:      DefaultPublishWindow,
		instance:    fmt.Sprintf("inboxbench-%d", time.Now().UnixNano()),
		calls:       driverutil.Calls{Driver: Name},
	}
	b.subs = driverutil.NewSubs[*subscription](&b.mu)
	if v, ok := opts[OptSendTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("rocketmq: option %s=%q: want a positive Go duration", OptSendTimeout, v)
		}
		b.sendTimeout = d
	}
	if b.window, err = brokers.PublishWindow(Name, opts, DefaultPublishWindow); err != nil {
		return nil, err
	}
	b.brokerAddrs = config.SplitList(opts[OptBrokerAddrs])
	return b, nil
}

// Name implements brokers.Broker.
func (b *Broker) Name() string { return Name }

// Capabilities implements brokers.Broker.
func (b *Broker) Capabilities() brokers.Capabilities {
	return brokers.Capabilities{
		PerKeyOrder:    true,
		ConsumerGroups: true,
		DeadLetter:     true,
		// A dead member's queues stay locked at the broker until
		// lockMaxLiveTime (60s by default; the local stack sets 6s); the
		// others retry the lock every 200ms until it expires.
		RedeliveryDelay: 70 * time.Second,
		Description: "RocketMQ, remoting protocol: rocketmq-client-go/v2 producer with per-queue batch sends " +
			"on the key's hash queue; the driver's own orderly consumer (broker queue locks, long-polling " +
			"pulls, in-place retry of the batch's unsettled rest), Reject → <topic>-DLQ, no redelivered flag",
	}
}

// uniqueName returns a client instance name unique in this process: the
// client library shares one connection set per instance name, and a
// consumer's Shutdown must not tear down the producer's.
func (b *Broker) uniqueName(role string) string {
	return fmt.Sprintf("%s-%s-%d", b.instance, role, b.seq.Add(1))
}

// producer returns the driver's producer, made on first use.
func (b *Broker) producer() (producerAPI, error) {
	b.prodOnce.Do(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.subs.Closed() {
			b.prodErr = errors.New("rocketmq: broker is closed")
			return
		}
		b.prod = newRemotingProducer(b)
	})
	return b.prod, b.prodErr
}

// masters returns the master broker addresses.
func (b *Broker) masters(ctx context.Context) ([]string, error) {
	if len(b.brokerAddrs) > 0 {
		return b.brokerAddrs, nil
	}
	ci, err := b.clusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	return ci.Masters(), nil
}

// brokerSet returns the addresses topics are created on, and how many
// broker groups (masters) they make: every broker the name servers know,
// slaves included (in controller mode a slave becomes the master, and
// must have the topic then: slaves copy the master's topics only every
// 10 s, and a master without the topic refuses every send), or the
// brokers of option broker-addrs, each a group.
func (b *Broker) brokerSet(ctx context.Context) ([]string, int, error) {
	if len(b.brokerAddrs) > 0 {
		return b.brokerAddrs, len(b.brokerAddrs), nil
	}
	ci, err := b.clusterInfo(ctx)
	if err != nil {
		return nil, 0, err
	}
	return ci.BrokerAddrs(), len(ci.Masters()), nil
}

// clusterInfo asks the name servers in turn for the cluster table, which
// must show a master.
func (b *Broker) clusterInfo(ctx context.Context) (*ClusterInfoResult, error) {
	var errs []error
	for _, ns := range b.namesrv {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		ci, err := b.rm.ClusterInfo(cctx, ns)
		cancel()
		if err == nil {
			if len(ci.Masters()) > 0 {
				return ci, nil
			}
			err = errors.New("no master broker registered")
		}
		errs = append(errs, fmt.Errorf("%s: %w", ns, err))
	}
	return nil, fmt.Errorf("rocketmq: find the brokers from the name server (set option %s to skip): %w", OptBrokerAddrs, errors.Join(errs...))
}

// queues returns the number of the topic's publish queues from a route
// query; 0 when the name servers do not route the topic.
func (b *Broker) queues(ctx context.Context, topic string) (int, error) {
	var errs []error
	for _, ns := range b.namesrv {
		n, err := b.rm.RouteQueues(ctx, ns, topic)
		if err == nil {
			return n, nil
		}
		errs = append(errs, err)
	}
	return 0, fmt.Errorf("rocketmq: route of %s: %w", topic, errors.Join(errs...))
}

// Setup creates topic and topic-DLQ with shards read/write queues on every
// broker (brokerSet) and waits until the name server routes them.
func (b *Broker) Setup(ctx context.Context, topic string, shards int) error {
	if shards < 1 {
		return fmt.Errorf("rocketmq: setup %s: shards must be at least 1, got %d", topic, shards)
	}
	addrs, groups, err := b.brokerSet(ctx)
	if err != nil {
		return err
	}
	want := shards * groups
	if n, err := b.queues(ctx, topic); err != nil {
		return fmt.Errorf("rocketmq: setup %s: %w", topic, err)
	} else if n != 0 && n != want {
		// CreateTopic would silently re-size it and break key→queue mapping.
		return fmt.Errorf("rocketmq: setup %s: topic exists with %d queues, the workload asks for %d: delete it or use another topic name", topic, n, want)
	}
	for _, t := range []string{topic, topic + DLQSuffix} {
		for _, addr := range addrs {
			cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			err := b.rm.CreateTopic(cctx, addr, t, shards)
			cancel()
			if err != nil {
				return fmt.Errorf("rocketmq: %w", err)
			}
		}
	}
	// Confirm through the route, as producers and consumers will see it.
	for _, t := range []string{topic, topic + DLQSuffix} {
		for {
			n, err := b.queues(ctx, t)
			if err == nil && n == want {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("rocketmq: setup %s: no route with %d queues yet (have %d, %v): %w", t, want, n, err, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// DeleteTopic implements brokers.TopicDeleter.
func (b *Broker) DeleteTopic(ctx context.Context, topic string) error {
	addrs, _, err := b.brokerSet(ctx)
	if err != nil {
		return err
	}
	if v, ok := b.topics.LoadAndDelete(topic); ok {
		v.(*topicState).dropSenders()
	}
	for _, t := range []string{topic, topic + DLQSuffix} {
		if err := b.rm.DeleteTopic(ctx, addrs, b.namesrv, t); err != nil {
			return fmt.Errorf("rocketmq: %w", err)
		}
	}
	return nil
}

// Close implements brokers.Broker.
func (b *Broker) Close() error {
	first, err := b.subs.Close(nil)
	if !first {
		return nil
	}
	errs := []error{err}
	b.topics.Range(func(_, v any) bool {
		v.(*topicState).dropSenders()
		return true
	})
	if !driverutil.Bounded(15*time.Second, b.sending.Wait) {
		errs = append(errs, errors.New("rocketmq: the queue senders did not stop within 15s"))
	}
	b.calls.Close(errors.New("broker is closed"), 5*time.Second)
	b.prodOnce.Do(func() {}) // no producer may start after Close
	if b.prod != nil && !driverutil.Bounded(15*time.Second, func() { _ = b.prod.Shutdown() }) {
		errs = append(errs, errors.New("rocketmq: producer shutdown did not finish within 15s"))
	}
	return errors.Join(errs...)
}
