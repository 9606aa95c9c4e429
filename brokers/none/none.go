// Package none is the database-only baseline, registered as "none": no
// broker and no network. PublishAsync (and Publish, which waits for it)
// hands messages straight to in-memory per-shard queues and Subscribe
// calls the Handler from one goroutine per shard, with the same batch,
// retry, reject and crash semantics as the
// broker drivers, so a run with --brokers none measures the inbox alone
// under the same concurrency. Its figures are the denominator for the
// through-broker ratios (Capabilities.Baseline; "vs none" in docs/running.md).
//
// Sharding: keys are hashed onto the topic's shards exactly as the
// rabbitmq driver does (driverutil.Shard), so both spread a workload's
// keys identically.
//
// State: topics live in a process-wide registry, shared by every Broker
// instance of the process, so a consumer that opens a new instance after a
// crash sees the same queues, as it would with a real broker. Nothing
// survives the process, and memory is not bounded: a message is held until
// it is acknowledged or dead-lettered (the workloads are finite).
//
// Ordering: a shard is owned by one subscription at a time (as RabbitMQ's
// single-active-consumer): its worker takes a batch of up to MaxBatch
// messages from the head of the queue — whatever is there, it never waits
// to fill one — and takes the next only after this one is settled. When
// the owner ends, the shard's waiting worker of another subscription takes
// over. The group name is ignored, as by the rabbitmq driver: all
// subscriptions of a topic compete for its shards (ConsumerGroups false).
//
// Verdicts: Ack removes the message; Retry keeps it and what follows in
// place and calls the Handler again after the backoff; Reject moves it to
// the topic's in-memory dead-letter list (DeadLetters); Crash ends the
// subscription with ErrCrashed and acknowledges nothing more: the
// unacknowledged messages stay at the head of their shard, and the next
// owner gets them with Redelivered set and DeliveryCount incremented
// (DeliveryCount counts hand-overs to a subscription, not in-place
// retries, like a quorum queue's x-delivery-count).
//
// Prefetch has no meaning here: the queue itself is the buffer. Nor has
// SettleOnReceipt, the transport's negative control, which Subscribe
// refuses: nothing is received ahead of the Handler, so there is nothing
// to settle early.
package none

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// Name is the driver name.
const Name = "none"

func init() {
	brokers.Register(Name, brokers.Constructor(New), brokers.Info{Baseline: true}) // no transport: no service, no client library
}

// registry holds every topic of the process, shared by all Broker
// instances (see the package doc).
var registry = struct {
	mu     sync.Mutex
	topics map[string]*topic
}{topics: map[string]*topic{}}

// item is one stored message.
type item struct {
	msg       brokers.Message
	id        string    // transport id: "<topic>.<shard>#<seq>"
	published time.Time // reported as BrokerTime
	handed    int       // times handed to a subscription (in-place retries not counted)
}

// shard is one queue. The owner's in-flight batch stays at the head of
// items until it is settled, so a crash leaves it there for the next owner.
type shard struct {
	name  string
	items []*item
	owner *subscription
	// changed is closed (and replaced) when items arrive, the owner leaves
	// or the topic is deleted: the waiting workers look again.
	changed chan struct{}
}

func (sh *shard) signal() {
	close(sh.changed)
	sh.changed = make(chan struct{})
}

type topic struct {
	name string

	mu      sync.Mutex
	shards  []*shard
	seq     uint64
	deleted bool
	dead    []brokers.Message
	deadNew chan struct{} // closed (and replaced) when dead grows
}

// Broker is a handle on the process-wide in-memory topics.
type Broker struct {
	calls driverutil.Calls
	mu    sync.Mutex
	subs  *driverutil.Subs[*subscription]
}

// New accepts no options.
func New(_ context.Context, _ config.Config, opts brokers.Options) (*Broker, error) {
	if err := brokers.CheckOptions(Name, opts); err != nil {
		return nil, err
	}
	b := &Broker{calls: driverutil.Calls{Driver: Name}}
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
		DeliveryCount:  true,
		DeadLetter:     true,
		InProcess:      true,
		Baseline:       true,
		Description: "database-only baseline: no broker, no network — in-process per-shard queues (keys hashed as " +
			"rabbitmq does), one handler goroutine per shard with the same batch/retry/reject/crash semantics, " +
			"so it measures the inbox alone with the same concurrency",
	}
}

func lookup(name string) (*topic, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	t, ok := registry.topics[name]
	if !ok {
		return nil, fmt.Errorf("none: topic %s does not exist in this process: run Setup first", name)
	}
	return t, nil
}

// Setup implements brokers.Broker: it creates the topic's shards in the
// process-wide registry. An existing topic with as many shards is kept.
func (b *Broker) Setup(ctx context.Context, name string, shards int) error {
	if shards < 1 {
		return fmt.Errorf("none: setup %s: shards must be at least 1, got %d", name, shards)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("none: setup %s: %w", name, err)
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if t, ok := registry.topics[name]; ok {
		if len(t.shards) != shards {
			return fmt.Errorf("none: setup %s: topic exists with %d shards, the workload asks for %d: delete it or use another topic name", name, len(t.shards), shards)
		}
		return nil
	}
	t := &topic{name: name, deadNew: make(chan struct{})}
	for i := 0; i < shards; i++ {
		t.shards = append(t.shards, &shard{name: name + "." + strconv.Itoa(i), changed: make(chan struct{})})
	}
	registry.topics[name] = t
	return nil
}

// Publish implements brokers.Broker: PublishAsync and a wait.
func (b *Broker) Publish(ctx context.Context, name string, msgs []brokers.Message) []error {
	return brokers.PublishWait(ctx, b, name, msgs)
}

// PublishAsync implements brokers.AsyncPublisher: the messages are
// appended to their shards under the topic's lock, so one key's messages
// keep slice order, and are confirmed at once (done runs on a goroutine of
// its own). There is no window: it never blocks on consumers.
func (b *Broker) PublishAsync(ctx context.Context, name string, msgs []brokers.Message, done func([]error)) {
	if p := b.calls.Start(ctx, name, msgs, done); p != nil {
		p.SettleAllInCall(b.publish(ctx, name, msgs))
	}
}

// publish appends msgs to their shards, all or none.
func (b *Broker) publish(ctx context.Context, name string, msgs []brokers.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("none: publish to %s: %w", name, err)
	}
	t, err := lookup(name)
	if err != nil {
		return err
	}
	now := time.Now()
	touched := make([]bool, len(t.shards))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.deleted {
		return fmt.Errorf("none: publish to %s: topic was deleted", name)
	}
	for _, m := range msgs {
		i := driverutil.Shard(m.Key, len(t.shards))
		sh := t.shards[i]
		t.seq++
		// The caller may reuse its header map once Publish returned.
		m.Headers = maps.Clone(m.Headers)
		sh.items = append(sh.items, &item{msg: m, id: sh.name + "#" + strconv.FormatUint(t.seq, 10), published: now})
		touched[i] = true
	}
	for i, ok := range touched {
		if ok {
			t.shards[i].signal()
		}
	}
	return nil
}

// DeadLetters implements brokers.DeadLetterReader: it returns what was
// dead-lettered from the topic so far (nothing is removed), waiting for
// want of them or until ctx ends.
func (b *Broker) DeadLetters(ctx context.Context, name string, want int) ([]brokers.Message, error) {
	t, err := lookup(name)
	if err != nil {
		return nil, err
	}
	for {
		t.mu.Lock()
		out := append([]brokers.Message(nil), t.dead...)
		more := t.deadNew
		t.mu.Unlock()
		if len(out) >= want {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("none: read dead letters of %s: got %d of %d: %w", name, len(out), want, ctx.Err())
		case <-more:
		}
	}
}

// DeleteTopic implements brokers.TopicDeleter. Subscriptions still
// running on the topic end with an error.
func (b *Broker) DeleteTopic(_ context.Context, name string) error {
	registry.mu.Lock()
	t, ok := registry.topics[name]
	delete(registry.topics, name)
	registry.mu.Unlock()
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deleted = true
	for _, sh := range t.shards {
		sh.items = nil
		sh.signal()
	}
	return nil
}

// Close implements brokers.Broker: it closes this instance's
// subscriptions; the topics stay for other instances of the process.
func (b *Broker) Close() error {
	first, err := b.subs.Close(nil)
	if first {
		b.calls.Close(errors.New("broker is closed"), time.Second)
	}
	return err
}

// subscription runs one worker per shard; a worker handles its shard only
// while its subscription owns it.
type subscription struct {
	driverutil.Sub
	b *Broker
	t *topic

	ctx    context.Context // cancelled on Close, Crash or failure
	cancel context.CancelFunc

	endOnce sync.Once
	workers sync.WaitGroup
}

// Subscribe implements brokers.Broker. group is ignored (see the package
// doc).
func (b *Broker) Subscribe(ctx context.Context, name, _ string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("none: subscribe %s: %w", name, err)
	}
	if opts.SettleOnReceipt {
		return nil, fmt.Errorf("none: subscribe %s: SettleOnReceipt: the baseline has no transport to settle early (it hands the Handler the head of its queue, nothing ahead of it)", name)
	}
	t, err := lookup(name)
	if err != nil {
		return nil, err
	}
	s := &subscription{b: b, t: t}
	s.Init(opts, h, s.end)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if !b.subs.Add(s) {
		s.cancel()
		return nil, errors.New("none: subscribe: broker is closed")
	}
	for i := range t.shards {
		s.workers.Add(1)
		go s.run(i)
	}
	return s, nil
}

// end stops the subscription once (Close: running handlers finish and
// what they finished is acknowledged; the rest stays queued); Done closes
// when every worker left (and gave up its shard).
func (s *subscription) end(cause error) {
	s.endOnce.Do(func() {
		s.cancel()
		go func() {
			s.workers.Wait()
			s.b.subs.Remove(s)
			s.Finish(cause)
		}()
	})
}

// run is shard i's worker: it waits to own the shard, then handles its
// queue in batches, one at a time, until the subscription ends.
func (s *subscription) run(i int) {
	defer s.workers.Done()
	defer s.release(i)
	sh := s.t.shards[i]
	for {
		if s.ctx.Err() != nil {
			return
		}
		ds, wait, err := s.take(sh)
		if err != nil {
			s.end(err)
			return
		}
		if ds == nil {
			select {
			case <-s.ctx.Done():
				return
			case <-wait:
				continue
			}
		}
		s.Received(len(ds))
		settle := func(ds []*brokers.Delivery, vs []brokers.Verdict) error { return s.settle(sh, ds, vs) }
		fail := func(err error) { s.end(fmt.Errorf("none: %s: %w", sh.name, err)) }
		if !s.Handle(s.ctx, ds, settle, fail) {
			return // unfinished: the rest stays at the head of the shard
		}
	}
}

// take returns the next batch of sh when this subscription owns it (taking
// ownership when the shard is free), or else the channel to wait on.
func (s *subscription) take(sh *shard) ([]*brokers.Delivery, <-chan struct{}, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if s.t.deleted {
		return nil, nil, fmt.Errorf("none: topic %s was deleted", s.t.name)
	}
	if sh.owner == nil {
		sh.owner = s
	}
	if sh.owner != s || len(sh.items) == 0 {
		return nil, sh.changed, nil
	}
	n := min(s.Opts.MaxBatch, len(sh.items))
	ds := make([]*brokers.Delivery, n)
	slab := make([]brokers.Delivery, n) // one allocation for the batch's deliveries
	for k, it := range sh.items[:n] {
		it.handed++
		ds[k] = &slab[k]
		*ds[k] = brokers.Delivery{
			Message:       it.msg,
			Redelivered:   it.handed > 1,
			DeliveryCount: it.handed,
			TransportID:   it.id,
			Shard:         sh.name,
			BrokerTime:    it.published,
		}
	}
	return ds, nil, nil
}

// settle removes ds — the head of sh, in order — acknowledging Acks and
// dead-lettering Rejects. After a crash nothing is settled any more, as a
// broker would refuse the acks of a closed connection.
func (s *subscription) settle(sh *shard, ds []*brokers.Delivery, vs []brokers.Verdict) error {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if s.Crashed() {
		return brokers.ErrCrashed
	}
	if s.t.deleted {
		return fmt.Errorf("topic %s was deleted", s.t.name)
	}
	if sh.owner != s || len(sh.items) < len(ds) {
		return fmt.Errorf("settle %d deliveries: the shard is not this subscription's or holds fewer (driver bug)", len(ds))
	}
	dead := false
	for k, d := range ds {
		it := sh.items[k]
		if it.id != d.TransportID {
			return fmt.Errorf("settle %s: the head of the shard is %s (driver bug)", d.TransportID, it.id)
		}
		if vs[k] == brokers.Reject {
			s.t.dead = append(s.t.dead, it.msg)
			dead = true
		}
	}
	clear(sh.items[:len(ds)])
	sh.items = sh.items[len(ds):]
	if dead {
		close(s.t.deadNew)
		s.t.deadNew = make(chan struct{})
	}
	return nil
}

// release gives up sh when this subscription owns it, waking the workers
// of other subscriptions waiting for it.
func (s *subscription) release(i int) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if sh := s.t.shards[i]; sh.owner == s {
		sh.owner = nil
		sh.signal()
	}
}
