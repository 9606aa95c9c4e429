package rocketmq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

// worker consumes one queue this consumer holds the lock of: a puller
// keeps about Prefetch messages buffered, the handler loop hands them to
// the Handler in order, MaxBatch at a time.
type worker struct {
	q      queue
	addr   string // the queue's master broker
	ctx    context.Context
	cancel context.CancelFunc
	exited chan struct{} // both loops returned

	lease     atomic.Int64 // unix nanos: no handler call starts after it
	acked     atomic.Int64 // offset after the last settled message; -1 before the start offset is known
	committed int64        // under subscription.commitMu; -1 likewise

	mu    sync.Mutex
	buf   []*primitive.MessageExt
	wake  chan struct{} // cap 1: messages were added
	space chan struct{} // cap 1: messages were taken
}

// rebalance computes this member's share of the topic's queues, hands
// back what it should no longer hold, and locks (or renews) the rest. It
// reports whether the consumer holds its whole share.
func (s *subscription) rebalance() bool {
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	r, err := s.routeFor(ctx)
	if err != nil {
		s.warn("route of the topic", err)
		return false
	}
	if s.needsHeartbeat(r) {
		if err := s.heartbeatAll(ctx); err != nil {
			s.warn("heartbeat", err)
			s.routeStale.Store(true)
			return false
		}
	}
	ids, err := s.members(ctx, r)
	if err != nil {
		s.warn("member list of the group", err)
		s.routeStale.Store(true)
		return false
	}
	if !slices.Contains(ids, s.clientID) {
		// Not registered (yet, or any more after a broker restart):
		// computing a share without ourselves would drop every queue.
		s.mu.Lock()
		s.beatAt = time.Time{}
		s.mu.Unlock()
		return false
	}
	want := allocate(r.queues, ids, s.clientID)
	s.mu.Lock()
	for q, w := range s.workers {
		if !slices.Contains(want, q) {
			s.handBack(w, true)
		}
	}
	s.mu.Unlock()
	return s.lockShare(ctx, r, want)
}

// lockShare locks the wanted queues broker by broker: a queue newly
// locked gets a worker, a held one a longer lease, and a held one the
// broker no longer grants is dropped at once (another member has it).
func (s *subscription) lockShare(ctx context.Context, r *topicRoute, want []queue) bool {
	settled := true
	byAddr := map[string][]queue{}
	s.mu.Lock()
	for _, q := range want {
		if _, busy := s.releasing[q]; busy {
			settled = false // still handing it back after a lost lock
			continue
		}
		byAddr[r.masters[q.BrokerName]] = append(byAddr[r.masters[q.BrokerName]], q)
	}
	s.mu.Unlock()
	for addr, qs := range byAddr {
		sent := time.Now()
		got, err := s.gc.lock(ctx, addr, qs)
		if err != nil {
			s.warn("lock of queues on "+addr, err)
			s.routeStale.Store(true)
			settled = false
			continue
		}
		until := sent.Add(lockLease)
		s.mu.Lock()
		for _, q := range qs {
			w := s.workers[q]
			_, busy := s.releasing[q] // its lease ran out during the call
			switch {
			case w != nil && w.addr != addr:
				// The group's master moved (controller mode): the
				// worker stops pulling from the old one, its finished
				// offset is committed to the new one, whose lock this
				// consumer now holds, and the next round consumes the
				// queue there.
				s.handOver(w, addr)
				settled = false
			case slices.Contains(got, q) && w != nil:
				w.lease.Store(until.UnixNano())
			case busy:
				settled = false
			case slices.Contains(got, q):
				s.start(q, addr, until)
			case w != nil:
				s.handBack(w, false)
				settled = false
			default:
				settled = false // its previous owner has not let go yet
			}
		}
		s.mu.Unlock()
	}
	return settled
}

// start runs a worker for a queue just locked. Called with s.mu held.
func (s *subscription) start(q queue, addr string, until time.Time) {
	if s.ctx.Err() != nil {
		return
	}
	w := &worker{q: q, addr: addr, exited: make(chan struct{}), committed: -1,
		wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
	w.ctx, w.cancel = context.WithCancel(s.ctx)
	w.lease.Store(until.UnixNano())
	w.acked.Store(-1)
	s.workers[q] = w
	time.AfterFunc(time.Until(until), func() { s.expire(w) })
	go s.run(w)
}

// expire runs when the worker's lease may have run out: renewed since,
// it looks again when the new lease ends; not renewed, the queue is
// handed back as a lock the broker no longer grants (nothing committed or
// unlocked), so no Handler call starts without the lock — a retry of the
// batch in progress included, which waitLease does not see — and the
// queue is no longer pulled. A later rebalance round locks it afresh.
// The renewals run in the rebalance loop, which a broker that does not
// answer holds up for callTimeout: hence a timer of the worker's own.
func (s *subscription) expire(w *worker) {
	if w.ctx.Err() != nil {
		return
	}
	if left := time.Until(time.Unix(0, w.lease.Load())); left > 0 {
		time.AfterFunc(left, func() { s.expire(w) })
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers[w.q] == w {
		s.handBack(w, false)
	}
}

// handBack stops a worker; once its handler call returned, the queue's
// finished offset is committed and its lock released (keep), or, when
// the lock was lost to another member, nothing more is done with it.
// Called with s.mu held.
func (s *subscription) handBack(w *worker, keep bool) {
	var then func(ctx context.Context)
	if keep {
		then = func(ctx context.Context) {
			if err := s.commit(ctx, w); err != nil {
				s.warn("commit on hand-over of "+w.q.String()+" (its last messages will be redelivered)", err)
			}
			_ = s.gc.unlock(ctx, w.addr, []queue{w.q}) // else it expires
		}
	}
	s.release(w, then)
}

// handOver stops a worker whose queue's master moved to addr: once its
// handler call returned, its finished offset is committed to addr (the
// old master is gone or demoted), and the queue is consumed there from
// the next round on. Called with s.mu held.
func (s *subscription) handOver(w *worker, addr string) {
	s.release(w, func(ctx context.Context) {
		w.addr = addr
		if err := s.commit(ctx, w); err != nil {
			s.warn("commit on the new master of "+w.q.String()+" (its last messages will be redelivered)", err)
		}
	})
}

// release stops a worker and, once its handler call returned, runs then
// (nil: nothing; skipped after a crash, which settles nothing more)
// before the queue counts as released and a rebalance may take it again.
// Called with s.mu held.
func (s *subscription) release(w *worker, then func(ctx context.Context)) {
	delete(s.workers, w.q)
	done := make(chan struct{})
	s.releasing[w.q] = done
	w.cancel()
	go func() {
		defer close(done)
		<-w.exited
		if then != nil && !s.Crashed() {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			then(ctx)
			cancel()
		}
		s.mu.Lock()
		delete(s.releasing, w.q)
		s.mu.Unlock()
		s.rebalanceSoon()
	}()
}

// run finds the queue's start offset and consumes it until the worker is
// stopped or the handler loop ends the subscription.
func (s *subscription) run(w *worker) {
	defer close(w.exited)
	off, ok := s.startOffset(w)
	if !ok {
		return
	}
	w.acked.Store(off)
	s.commitMu.Lock()
	w.committed = off
	s.commitMu.Unlock()
	pulled := make(chan struct{})
	go func() {
		defer close(pulled)
		s.pullLoop(w, off)
	}()
	s.handleLoop(w)
	w.cancel()
	<-pulled
}

func (s *subscription) startOffset(w *worker) (int64, bool) {
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(w.ctx, callTimeout)
		off, err := s.gc.offset(ctx, w.addr, w.q)
		cancel()
		if err == nil {
			return off, true
		}
		if w.ctx.Err() != nil {
			return 0, false
		}
		s.routeStale.Store(true)
		s.warn("offset of "+w.q.String(), err)
		if !ctxtime.Sleep(w.ctx, backoff) {
			return 0, false
		}
		backoff = min(2*backoff, 3*time.Second)
	}
}

// pullLoop keeps the worker's buffer filled from offset off on; a pull
// that finds nothing waits at the broker for the next message.
func (s *subscription) pullLoop(w *worker, off int64) {
	backoff := 100 * time.Millisecond
	for w.waitSpace(s.Opts.Prefetch) {
		ctx, cancel := context.WithTimeout(w.ctx, 2*pullHold)
		res, err := s.gc.pull(ctx, w.addr, pullRequest{q: w.q, offset: off, max: min(s.Opts.Prefetch, pullMax), hold: pullHold})
		cancel()
		if err != nil {
			if w.ctx.Err() != nil {
				return
			}
			s.routeStale.Store(true)
			s.warn("pull from "+w.q.String(), err)
			if !ctxtime.Sleep(w.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 3*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(res.msgs) > 0 {
			if s.Opts.SettleOnReceipt && !s.settleOnReceipt(w, res.next) {
				return
			}
			s.Received(len(res.msgs))
			w.push(res.msgs)
		} else if res.moved {
			w.ack(res.next) // what lay before it is gone
		}
		off = res.next
	}
}

// settleOnReceipt is the negative control SettleOnReceipt: the pulled
// offset counts as consumed and is committed before any message of the
// pull reaches the Handler. It reports false, the pull handed to no one,
// when the worker stopped before the commit was made.
func (s *subscription) settleOnReceipt(w *worker, next int64) bool {
	w.ack(next)
	ctx, cancel := context.WithTimeout(w.ctx, callTimeout)
	defer cancel()
	if err := s.commit(ctx, w); err != nil {
		if w.ctx.Err() != nil {
			return false
		}
		s.warn("commit on receipt (SettleOnReceipt) of "+w.q.String(), err)
	}
	return true
}

// handleLoop hands the buffered messages to the Handler in order.
func (s *subscription) handleLoop(w *worker) {
	shard := w.q.String() // one queue per worker: built once, not per delivery
	for {
		msgs := w.take(s.Opts.MaxBatch)
		if msgs == nil || !w.waitLease() {
			return
		}
		ds := make([]*brokers.Delivery, len(msgs))
		for i, m := range msgs {
			ds[i] = &brokers.Delivery{
				Message:     message(m),
				TransportID: transportID(shard, m),
				Shard:       shard,
				BrokerTime:  time.UnixMilli(m.StoreTimestamp),
			}
		}
		settle := driverutil.InOrder(
			func(i int) error { return s.deadLetter(ds[i]) },
			func(i int) { w.ack(msgs[i].QueueOffset + 1) })
		fail := func(err error) { s.end(fmt.Errorf("rocketmq: %s queue %s: %w", s.topic, w.q, err)) }
		if !s.Handle(w.ctx, ds, settle, fail) {
			return
		}
	}
}

// deadLetter sends a rejected delivery to "<topic>-DLQ". The Handler
// decided: the copy is sent even while the subscription closes.
func (s *subscription) deadLetter(d *brokers.Delivery) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.b.sendTimeout)
	defer cancel()
	if err := s.b.send(ctx, s.topic+DLQSuffix, d.Message, map[string]string{propSource: d.TransportID}); err != nil {
		return fmt.Errorf("dead-letter %s: %w", d.TransportID, err)
	}
	return nil
}

// commit stores the worker's finished offset with the broker if it moved.
func (s *subscription) commit(ctx context.Context, w *worker) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	a := w.acked.Load()
	if a < 0 || a <= w.committed {
		return nil
	}
	if err := s.gc.commit(ctx, w.addr, w.q, a); err != nil {
		return err
	}
	w.committed = a
	return nil
}

// commitAll commits every held queue's finished offset (each rebalance
// round): after a crash, at most that much is handled again.
func (s *subscription) commitAll() {
	if s.Crashed() {
		return
	}
	s.mu.Lock()
	ws := make([]*worker, 0, len(s.workers))
	for _, w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	for _, w := range ws {
		if err := s.commit(ctx, w); err != nil && s.ctx.Err() == nil {
			s.warn("offset commit of "+w.q.String(), err)
		}
	}
}

// warn logs a failure the consumer retries by itself (driverutil.Sub.Warn:
// at most once per 10 s per subscription), unless the subscription ended.
func (s *subscription) warn(what string, err error) {
	if s.ctx.Err() != nil {
		return
	}
	s.Warn("rocketmq: "+what+" failed (the consumer retries)", "topic", s.topic, "group", s.group, "err", err)
}

// ack records that everything before offset next is settled.
func (w *worker) ack(next int64) {
	for {
		cur := w.acked.Load()
		if next <= cur || w.acked.CompareAndSwap(cur, next) {
			return
		}
	}
}

func (w *worker) waitLease() bool {
	for time.Now().UnixNano() >= w.lease.Load() {
		if !ctxtime.Sleep(w.ctx, 20*time.Millisecond) {
			return false
		}
	}
	return true
}

func (w *worker) waitSpace(limit int) bool {
	for {
		w.mu.Lock()
		n := len(w.buf)
		w.mu.Unlock()
		if n < limit {
			return w.ctx.Err() == nil
		}
		select {
		case <-w.space:
		case <-w.ctx.Done():
			return false
		}
	}
}

func (w *worker) push(msgs []*primitive.MessageExt) {
	w.mu.Lock()
	w.buf = append(w.buf, msgs...)
	w.mu.Unlock()
	signal(w.wake)
}

// take returns up to n buffered messages, waiting for the first; nil
// once the worker stops.
func (w *worker) take(n int) []*primitive.MessageExt {
	for {
		w.mu.Lock()
		if k := min(n, len(w.buf)); k > 0 {
			out := make([]*primitive.MessageExt, k)
			copy(out, w.buf)
			clear(w.buf[:k]) // let the GC have them once handled
			w.buf = w.buf[k:]
			w.mu.Unlock()
			signal(w.space)
			return out
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-w.ctx.Done():
			return nil
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// message rebuilds the published Message from a stored one.
func message(m *primitive.MessageExt) brokers.Message {
	out := brokers.Message{Key: m.GetShardingKey(), ID: m.GetProperty(propID), Body: m.Body}
	for k, v := range m.GetProperties() {
		if h, ok := strings.CutPrefix(k, propHeaderPref); ok {
			if out.Headers == nil {
				out.Headers = map[string]string{}
			}
			out.Headers[h] = v
		}
	}
	return out
}

// transportID is the message's id on the broker: its id, queue and offset.
func transportID(shard string, m *primitive.MessageExt) string {
	return m.MsgId + "@" + shard + ":" + strconv.FormatInt(m.QueueOffset, 10)
}

// DeadLetters implements brokers.DeadLetterReader by consuming
// "<topic>-DLQ" from the first offset with a throw-away group.
func (b *Broker) DeadLetters(ctx context.Context, topic string, want int) ([]brokers.Message, error) {
	var (
		mu  sync.Mutex
		out []brokers.Message
		got = make(chan struct{}, 1)
	)
	sub, err := b.Subscribe(ctx, topic+DLQSuffix, fmt.Sprintf("inboxbench-dlq-reader-%d", time.Now().UnixNano()), brokers.SubscribeOptions{},
		brokers.PerDelivery(func(_ context.Context, d *brokers.Delivery) brokers.Verdict {
			mu.Lock()
			out = append(out, d.Message)
			mu.Unlock()
			signal(got)
			return brokers.Ack
		}))
	if err != nil {
		return nil, fmt.Errorf("rocketmq: read dead letters of %s: %w", topic, err)
	}
	defer sub.Close()
	for {
		mu.Lock()
		n := len(out)
		mu.Unlock()
		if n >= want {
			break
		}
		select {
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return append([]brokers.Message(nil), out...), fmt.Errorf("rocketmq: read dead letters of %s: got %d of %d: %w", topic, n, want, ctx.Err())
		case <-got:
		case <-time.After(100 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]brokers.Message(nil), out...), nil
}
