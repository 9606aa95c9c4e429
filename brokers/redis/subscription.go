package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// blockFor is how long a read of new entries waits for one: Close waits
// for the reads under way.
const blockFor = 250 * time.Millisecond

// giveUpAfter ends a subscription whose worker has not reached the server
// for this long (the runner subscribes again).
const giveUpAfter = 2 * time.Minute

// subscription is one consumer of the group on every stream of the
// topic, with a worker per stream (the package doc says how they read).
type subscription struct {
	driverutil.Sub
	b                      *Broker
	topic, group, consumer string
	client                 *goredis.Client // its own pool: a blocking read per stream

	ctx     context.Context // cancelled on Close, Crash or failure
	cancel  context.CancelFunc
	endOnce sync.Once
	workers sync.WaitGroup
}

// Subscribe implements brokers.Broker: it creates the group on every
// stream of the topic (from the beginning, unless it exists) and starts a
// worker per stream.
func (b *Broker) Subscribe(ctx context.Context, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	n, err := b.createGroup(ctx, topic, group)
	if err != nil {
		return nil, err
	}
	o, err := clientOptions(b.cfg, 2*n+4)
	if err != nil {
		return nil, err
	}
	s := &subscription{b: b, topic: topic, group: group, consumer: consumerName(), client: goredis.NewClient(o)}
	s.Init(opts, h, s.end)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if !b.subs.Add(s) {
		s.cancel()
		s.client.Close()
		return nil, errors.New("redis: subscribe: broker is closed")
	}
	for i := 0; i < n; i++ {
		s.workers.Add(1)
		go s.run(StreamName(topic, i))
	}
	return s, nil
}

// createGroup creates group on every stream of topic, reading from the
// beginning, unless it exists; it returns the topic's shard count.
func (b *Broker) createGroup(ctx context.Context, topic, group string) (int, error) {
	n, err := b.shardCount(ctx, topic)
	if err != nil {
		return 0, err
	}
	cmds, _ := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := 0; i < n; i++ {
			p.XGroupCreate(ctx, StreamName(topic, i), group, "0")
		}
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); err != nil && !isBusyGroup(err) {
			return 0, b.errorf("create the group %s of %s: %w", group, topic, err)
		}
	}
	return n, nil
}

// consumerName is unique per subscription: host, process and a random
// part, so XINFO CONSUMERS tells who read what.
func consumerName() string {
	host, _ := os.Hostname()
	r := make([]byte, 4)
	_, _ = rand.Read(r)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(r))
}

// end stops the subscription once: the workers stop (their handlers
// finish, and what those finished is acknowledged unless the
// subscription crashed), give their leases up, and Done closes.
func (s *subscription) end(cause error) {
	s.endOnce.Do(func() {
		s.cancel()
		go func() {
			s.workers.Wait()
			s.client.Close()
			s.b.subs.Remove(s)
			s.Finish(cause)
		}()
	})
}

// errFatal marks what ends the subscription rather than the worker's
// turn: the handler broke its contract, the stream or group is gone.
type errFatal struct{ error }

// Unwrap is the error itself.
func (e errFatal) Unwrap() error { return e.error }

// run is one stream's worker: it takes the stream's lease when it is
// free, reads while it holds it, and takes it again when it lost it,
// until the subscription ends.
func (s *subscription) run(stream string) {
	defer s.workers.Done()
	l := &lease{c: s.client, key: stream + LeaseInfix + s.group, own: s.consumer, ttl: s.b.lease}
	w := &worker{s: s, stream: stream, lease: l}
	reached := time.Now()
	for s.ctx.Err() == nil {
		ok, err := l.take(s.ctx)
		if err == nil && ok {
			err = w.own()
			l.drop()
		}
		var fatal errFatal
		switch {
		case s.ctx.Err() != nil:
			return
		case errors.As(err, &fatal):
			s.end(fmt.Errorf("redis: %s: %w", stream, fatal.error))
			return
		case err == nil:
			reached = time.Now()
		case time.Since(reached) > giveUpAfter:
			s.end(fmt.Errorf("redis: %s: no answer for %s: %w", stream, giveUpAfter, err))
			return
		}
		wait := l.ttl / 10 // a busy lease: look again soon
		if err != nil {
			wait = time.Second
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(wait):
		}
	}
}

// worker reads one stream while its subscription holds the lease.
type worker struct {
	s       *subscription
	stream  string
	lease   *lease
	trimmed time.Time
	// acks are the entries the Handler acknowledged whose XACK is not
	// sent yet: one XACK per read (flush).
	acks []string
}

// own reads and handles the stream while the lease is held: the entries
// other consumers left pending, this consumer's pending entries, then new
// ones. It returns nil when the lease was lost or the subscription
// ended, the error that stopped it otherwise.
func (w *worker) own() error {
	ctx, cancel := context.WithCancel(w.s.ctx)
	defer cancel()
	var keeping sync.WaitGroup
	keeping.Add(1)
	go func() { defer keeping.Done(); w.lease.keep(ctx, cancel) }()
	defer keeping.Wait()
	defer cancel()
	if err := w.takeOver(ctx); err != nil {
		return err
	}
	w.acks = w.acks[:0]
	for cursor := "0"; ctx.Err() == nil; {
		ds, next, err := w.read(ctx, cursor)
		if err != nil {
			return err
		}
		cursor = next
		err = w.handle(ctx, ds)
		if ferr := w.flush(); err == nil {
			err = ferr
		}
		if err != nil || ctx.Err() != nil {
			return err
		}
		w.trim(ctx)
	}
	return nil
}

// takeOver moves every entry another consumer of the group left pending
// to this one (JUSTID: the delivery count grows when it is read), and
// deletes the consumers that hold nothing any more.
func (w *worker) takeOver(ctx context.Context) error {
	c, s := w.s.client, w.s
	for start := "0-0"; ; {
		_, next, err := c.XAutoClaimJustID(ctx, &goredis.XAutoClaimArgs{Stream: w.stream, Group: s.group,
			Consumer: s.consumer, Start: start, Count: 1000}).Result()
		if err != nil {
			return w.failed("claim pending entries", err)
		}
		if next == "0-0" {
			break
		}
		start = next
	}
	consumers, err := c.XInfoConsumers(ctx, w.stream, s.group).Result()
	if err != nil {
		return w.failed("list consumers", err)
	}
	for _, other := range consumers {
		if other.Name != s.consumer && other.Pending == 0 {
			if err := c.XGroupDelConsumer(ctx, w.stream, s.group, other.Name).Err(); err != nil {
				return w.failed("delete consumer "+other.Name, err)
			}
		}
	}
	return nil
}

// failed is a worker's error: fatal when the stream or its group is gone.
func (w *worker) failed(what string, err error) error {
	gone := goredis.HasErrorPrefix(err, "NOGROUP")
	err = w.s.b.errorf("%s of %s: %w", what, w.stream, err)
	if gone {
		return errFatal{err}
	}
	return err
}

// read returns the next entries from cursor: this consumer's pending
// entries after cursor ("0" first), then new ones (">") once none is
// left, with the cursor to read from next.
func (w *worker) read(ctx context.Context, cursor string) ([]*brokers.Delivery, string, error) {
	s := w.s
	args := &goredis.XReadGroupArgs{Group: s.group, Consumer: s.consumer, Streams: []string{w.stream, cursor}, Count: int64(s.Opts.Prefetch)}
	if cursor == ">" {
		args.Block = blockFor
	}
	res, err := s.client.XReadGroup(ctx, args).Result()
	switch {
	case errors.Is(err, goredis.Nil) || (err != nil && ctx.Err() != nil):
		return nil, cursor, nil
	case err != nil:
		return nil, cursor, w.failed("read", err)
	}
	var msgs []goredis.XMessage
	if len(res) > 0 {
		msgs = res[0].Messages
	}
	if cursor != ">" && len(msgs) == 0 {
		return nil, ">", nil // the pending list is read: new entries now
	}
	var counts map[string]int64 // nil: new entries, delivered once
	if cursor != ">" {
		if counts, err = w.counts(ctx, msgs); err != nil {
			return nil, cursor, err
		}
	}
	if err := w.settleOnReceipt(ctx, msgs); err != nil {
		return nil, cursor, err
	}
	ds := w.deliveries(msgs, counts)
	s.Received(len(ds))
	if cursor == ">" {
		return ds, cursor, nil
	}
	return ds, msgs[len(msgs)-1].ID, nil
}

// settleOnReceipt is the negative control SettleOnReceipt: the entries
// of a read are acknowledged (XACK), synchronously, before any of them
// reaches a Handler.
func (w *worker) settleOnReceipt(ctx context.Context, msgs []goredis.XMessage) error {
	if !w.s.Opts.SettleOnReceipt || len(msgs) == 0 {
		return nil
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	if err := w.s.client.XAck(ctx, w.stream, w.s.group, ids...).Err(); err != nil {
		return w.failed("acknowledge on receipt (SettleOnReceipt)", err)
	}
	return nil
}

// counts asks XPENDING for the delivery counts of this consumer's
// pending entries msgs (in order).
func (w *worker) counts(ctx context.Context, msgs []goredis.XMessage) (map[string]int64, error) {
	s := w.s
	ps, err := s.client.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: w.stream, Group: s.group,
		Start: msgs[0].ID, End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)), Consumer: s.consumer}).Result()
	if err != nil {
		return nil, w.failed("read delivery counts", err)
	}
	out := make(map[string]int64, len(ps))
	for _, p := range ps {
		out[p.ID] = p.RetryCount
	}
	return out, nil
}

// deliveries turns entries into deliveries; counts holds the delivery
// counts of pending entries read again (nil: new entries, delivered
// once). An entry deleted while pending (no fields) is acknowledged and
// left out.
func (w *worker) deliveries(msgs []goredis.XMessage, counts map[string]int64) []*brokers.Delivery {
	ds := make([]*brokers.Delivery, 0, len(msgs))
	for _, m := range msgs {
		if len(m.Values) == 0 {
			_ = w.s.client.XAck(context.Background(), w.stream, w.s.group, m.ID).Err()
			continue
		}
		d := &brokers.Delivery{Message: message(m.Values), DeliveryCount: 1, TransportID: w.stream + "@" + m.ID,
			Shard: w.stream, BrokerTime: entryTime(m.ID)}
		if counts != nil {
			d.DeliveryCount = int(max(counts[m.ID], 1))
		}
		d.Redelivered = d.DeliveryCount > 1
		ds = append(ds, d)
	}
	return ds
}

// handle passes ds to the Handler in batches of MaxBatch and settles
// them; an error says why it stopped (a settle that failed, or a
// Handler that broke its contract: errFatal).
func (w *worker) handle(ctx context.Context, ds []*brokers.Delivery) error {
	var failed error
	fail := func(err error) { failed = err }
	settle := func(batch []*brokers.Delivery, vs []brokers.Verdict) error {
		err := w.settle(batch, vs)
		if err != nil {
			failed = err
		}
		return err
	}
	for len(ds) > 0 {
		n := min(len(ds), w.s.Opts.MaxBatch)
		if !w.s.Handle(ctx, ds[:n], settle, fail) {
			if failed != nil && !isSettleError(failed) {
				return errFatal{failed}
			}
			return failed
		}
		ds = ds[n:]
	}
	return nil
}

// settleError is a failed XACK or dead-letter copy: what was not
// acknowledged is read again from the pending list.
type settleError struct{ error }

// Unwrap is the error itself.
func (e settleError) Unwrap() error { return e.error }

func isSettleError(err error) bool {
	var se settleError
	return errors.As(err, &se)
}

// errSettleAfterCrash refuses settling once the subscription crashed, as
// the closed connection of a crashed process would.
var errSettleAfterCrash = errors.New("the subscription crashed: nothing more is acknowledged")

// settle acknowledges ds: their XACK waits for the rest of the read
// (flush), unless a delivery is rejected; then its copy to the
// dead-letter stream and the XACK of everything acknowledged so far go in
// one MULTI/EXEC.
func (w *worker) settle(ds []*brokers.Delivery, vs []brokers.Verdict) error {
	if w.s.Crashed() {
		return settleError{errSettleAfterCrash}
	}
	if w.s.Opts.SettleOnReceipt {
		return nil // acknowledged on receipt; a Reject is not dead-lettered
	}
	var rejected []*brokers.Delivery
	for i, d := range ds {
		w.acks = append(w.acks, d.TransportID[len(w.stream)+1:])
		if vs[i] == brokers.Reject {
			rejected = append(rejected, d)
		}
	}
	if len(rejected) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // also after Close began
	defer cancel()
	_, err := w.s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		for _, d := range rejected {
			// Not NOMKSTREAM: its nil answer would not stop the XACK.
			p.XAdd(ctx, &goredis.XAddArgs{Stream: w.s.topic + DLQSuffix,
				Values: append(fields(&d.Message), FieldFrom, d.TransportID)})
		}
		p.XAck(ctx, w.stream, w.s.group, w.acks...)
		return nil
	})
	w.acks = w.acks[:0]
	if err != nil {
		return settleError{w.s.b.errorf("dead-letter %d entries of %s: %w", len(rejected), w.stream, err)}
	}
	return nil
}

// flush sends the XACK of what the Handler acknowledged since the last
// one; after a Crash it drops them, as a process that died would: those
// entries are delivered again (as Kafka's offsets not yet committed are).
func (w *worker) flush() error {
	if len(w.acks) == 0 || w.s.Crashed() {
		w.acks = w.acks[:0]
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // also after Close began
	defer cancel()
	err := w.s.client.XAck(ctx, w.stream, w.s.group, w.acks...).Err()
	w.acks = w.acks[:0]
	if err != nil {
		return settleError{w.s.b.errorf("acknowledge entries of %s: %w", w.stream, err)}
	}
	return nil
}
