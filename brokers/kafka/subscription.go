package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// DefaultGroup is used when Subscribe is given an empty group.
const DefaultGroup = "inboxbench"

type subscription struct {
	driverutil.Sub // its end is shutdown
	b              *Broker
	topic          string
	group          string
	cl             *kgo.Client

	ctx    context.Context // cancelled by Close and Crash: stops polling and handlers
	cancel context.CancelFunc

	closeOnce sync.Once

	mu      sync.Mutex
	workers map[int32]*worker
	done    map[int32]kgo.EpochOffset // next offset to commit, per partition, finished by a handler
	// commitMu serialises commits, so a periodic commit can never land
	// after the revoke commit of the same partition.
	commitMu  sync.Mutex
	committed map[int32]int64

	loops sync.WaitGroup // poll loop and committer
}

// worker handles one partition's records in order.
type worker struct {
	p      int32
	shard  string // p in decimal, Delivery.Shard
	tid    string // transportPrefix of the partition
	ctx    context.Context
	cancel context.CancelFunc
	exited chan struct{}

	mu     sync.Mutex
	queue  []*kgo.Record
	paused bool
	wake   chan struct{} // cap 1

	// Used by run alone: the popped records (valid for one batch) and
	// Deliveries handed out one slab at a time, so a drain does not
	// allocate them one per record.
	batch []*kgo.Record
	slab  []brokers.Delivery
}

// deliveries returns n zeroed Deliveries from the worker's slab.
func (w *worker) deliveries(n int) []brokers.Delivery {
	if len(w.slab) < n {
		w.slab = make([]brokers.Delivery, max(n, 64))
	}
	d := w.slab[:n:n]
	w.slab = w.slab[n:]
	return d
}

// Subscribe implements brokers.Broker. The group's committed offsets are
// the starting point; a new group starts at the earliest record.
func (b *Broker) Subscribe(ctx context.Context, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	if group == "" {
		group = DefaultGroup
	}
	s := &subscription{
		b: b, topic: topic, group: group,
		workers:   map[int32]*worker{},
		done:      map[int32]kgo.EpochOffset{},
		committed: map[int32]int64{},
	}
	s.Init(opts, h, s.shutdown)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	cl, err := kgo.NewClient(append(b.base[:len(b.base):len(b.base)],
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Revoke callbacks run only between polls, so records handed to
		// workers are never for a partition that was already revoked.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.SessionTimeout(10*time.Second),
		kgo.RebalanceTimeout(30*time.Second),
	)...)
	if err != nil {
		s.cancel()
		return nil, b.errorf("subscribe %s as %s: %w", topic, group, err)
	}
	s.cl = cl
	if !b.subs.Add(s) {
		s.cancel()
		cl.Close()
		return nil, b.errorf("subscribe: broker is closed")
	}
	// Fail fast on an unreachable cluster or a missing topic instead of
	// polling forever: the caller's ctx bounds this check.
	if err := b.CheckTopic(ctx, topic); err != nil {
		s.cancel()
		closeBounded(cl)
		b.subs.Remove(s)
		return nil, err
	}
	s.loops.Add(2)
	go s.poll()
	go s.committer()
	return s, nil
}

// shutdown ends the subscription once: stop polling, stop workers (their
// running handler finishes), commit what finished unless crashed, leave the
// group, close the client.
func (s *subscription) shutdown(cause error) {
	s.closeOnce.Do(func() {
		go func() {
			s.cancel()
			s.loops.Wait()
			s.mu.Lock()
			ws := make([]*worker, 0, len(s.workers))
			for _, w := range s.workers {
				ws = append(ws, w)
			}
			s.mu.Unlock()
			stopWorkers(ws)
			var errs []error
			if cause != nil {
				errs = append(errs, cause)
			}
			if !s.Crashed() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := s.commit(cctx, nil); err != nil {
					errs = append(errs, err)
				}
				cancel()
			}
			// The final revoke (inside Close) finds no workers and, after a
			// crash, commits nothing.
			s.cl.AllowRebalance()
			if !closeBounded(s.cl) {
				errs = append(errs, s.b.errorf("consumer of %s did not close within 15s (unreachable cluster?)", s.topic))
			}
			s.b.subs.Remove(s)
			s.Finish(errors.Join(errs...))
		}()
	})
}

// poll fetches and hands each partition's records to its worker. With
// BlockRebalanceOnPoll a rebalance waits for AllowRebalance, so dispatch
// never races a revoke.
func (s *subscription) poll() {
	defer s.loops.Done()
	var lastWarn time.Time
	for {
		fetches := s.cl.PollFetches(s.ctx)
		if s.ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			// The client retries by itself; while a broker is down the same
			// error repeats many times a second: say it once per 10 s.
			if !errors.Is(err, context.Canceled) && time.Since(lastWarn) > 10*time.Second {
				lastWarn = time.Now()
				slog.Warn("kafka: fetch error (the client keeps retrying)", "broker", s.b.name, "topic", t, "partition", p, "err", err)
			}
		})
		var got []fetched
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) == 0 {
				return
			}
			s.mu.Lock()
			w := s.workers[ftp.Partition]
			s.mu.Unlock()
			if w == nil {
				return // not ours any more: the new owner starts from the committed offset
			}
			got = append(got, fetched{w, ftp.Records})
		})
		if s.Opts.SettleOnReceipt && !s.settleOnReceipt(got) {
			return // crashed meanwhile: nothing of this fetch was committed or handed out
		}
		for _, f := range got {
			f.w.push(s, f.recs)
		}
		s.cl.AllowRebalance()
	}
}

// fetched are one partition's records of a fetch, for its worker.
type fetched struct {
	w    *worker
	recs []*kgo.Record
}

// settleOnReceipt is the negative control SettleOnReceipt: the polled
// position of every partition of the fetch is committed, synchronously,
// before any of its records reaches a Handler. It reports false when the
// subscription crashed, which commits nothing more.
func (s *subscription) settleOnReceipt(got []fetched) bool {
	if len(got) == 0 {
		return true
	}
	parts := make([]int32, len(got))
	for i, f := range got {
		s.finished(f.recs[len(f.recs)-1])
		parts[i] = f.w.p
	}
	if err := s.commit(s.ctx, parts); err != nil && s.ctx.Err() == nil {
		slog.Warn("kafka: commit on receipt failed (SettleOnReceipt)", "broker", s.b.name, "err", err)
	}
	return !s.Crashed()
}

// highWater is the per-partition backlog above which fetching pauses, so a
// partition stuck in Retry cannot buffer without bound. It must hold
// several fetches: one 1 MiB fetch of 1 KiB records is already ~1000
// records, and a bound at one fetch paused and resumed the partition on
// nearly every fetch, halving the drain rate (bench calibrate showed it).
func (s *subscription) highWater() int { return max(4*s.Opts.Prefetch, 8192) }

func (w *worker) push(s *subscription, recs []*kgo.Record) {
	s.Received(len(recs))
	w.mu.Lock()
	w.queue = append(w.queue, recs...)
	pause := !w.paused && len(w.queue) > s.highWater()
	if pause {
		w.paused = true
	}
	w.mu.Unlock()
	if pause {
		s.cl.PauseFetchPartitions(map[string][]int32{s.topic: {w.p}})
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pop takes up to n buffered records (what was already fetched: it never
// waits for more), into a buffer that the next pop reuses.
func (w *worker) pop(s *subscription, n int) []*kgo.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	n = min(n, len(w.queue))
	if n == 0 {
		return nil
	}
	recs := append(w.batch[:0], w.queue[:n]...)
	w.batch = recs
	clear(w.queue[:n]) // let the GC have them once handled
	w.queue = w.queue[n:]
	if w.paused && len(w.queue) < s.highWater()/2 {
		w.paused = false
		s.cl.ResumeFetchPartitions(map[string][]int32{s.topic: {w.p}})
	}
	return recs
}

func (s *subscription) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range m[s.topic] {
		if s.workers[p] != nil || s.ctx.Err() != nil {
			continue
		}
		w := &worker{p: p, shard: strconv.Itoa(int(p)), tid: transportPrefix(s.topic, p), exited: make(chan struct{}), wake: make(chan struct{}, 1)}
		w.ctx, w.cancel = context.WithCancel(s.ctx)
		s.workers[p] = w
		go s.run(w)
	}
}

// revoked stops the revoked partitions' workers (a running handler
// finishes; queued records are dropped for the next owner), then commits
// what they finished — nothing more — before the partitions move.
func (s *subscription) revoked(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
	parts := s.detach(m[s.topic])
	if len(parts) == 0 || s.Crashed() {
		s.forget(parts)
		return
	}
	if err := s.commit(ctx, parts); err != nil {
		slog.Warn("kafka: commit on revoke failed; those records will be redelivered", "broker", s.b.name, "err", err)
	}
	s.forget(parts)
}

// lost is revoked without the commit: the partitions already belong to
// someone else.
func (s *subscription) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.forget(s.detach(m[s.topic]))
}

func (s *subscription) detach(parts []int32) []int32 {
	s.mu.Lock()
	var ws []*worker
	for _, p := range parts {
		if w := s.workers[p]; w != nil {
			ws = append(ws, w)
			delete(s.workers, p)
		}
	}
	s.mu.Unlock()
	stopWorkers(ws)
	return parts
}

func (s *subscription) forget(parts []int32) {
	s.mu.Lock()
	for _, p := range parts {
		delete(s.done, p)
	}
	s.mu.Unlock()
	s.commitMu.Lock()
	for _, p := range parts {
		delete(s.committed, p)
	}
	s.commitMu.Unlock()
}

func stopWorkers(ws []*worker) {
	for _, w := range ws {
		w.cancel()
	}
	for _, w := range ws {
		<-w.exited
	}
}

// run is a partition worker: batches of the records already fetched, in
// offset order, one Handler call at a time.
func (s *subscription) run(w *worker) {
	defer close(w.exited)
	for {
		recs := w.pop(s, s.Opts.MaxBatch)
		if len(recs) == 0 {
			select {
			case <-w.ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		if w.ctx.Err() != nil {
			return
		}
		ds := make([]*brokers.Delivery, len(recs))
		dels := w.deliveries(len(recs))
		for i, r := range recs {
			d := &dels[i]
			d.Message, d.TransportID, d.Shard, d.BrokerTime = message(r), transportID(w.tid, r.Offset), w.shard, r.Timestamp
			ds[i] = d
		}
		settle := driverutil.InOrder(
			func(i int) error { return s.b.DeadLetter(w.ctx, recs[i]) },
			func(i int) { s.finished(recs[i]) })
		fail := func(err error) { s.shutdown(s.b.errorf("%s partition %d: %w", s.topic, w.p, err)) }
		if !s.Handle(w.ctx, ds, settle, fail) {
			return
		}
	}
}

// finished makes everything up to r committable: the Handler finished r
// (Ack, or Reject with the dead-letter copy confirmed) and every record
// of the partition before it.
func (s *subscription) finished(r *kgo.Record) {
	s.mu.Lock()
	s.done[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
	s.mu.Unlock()
}

// committer commits finished offsets every commit interval.
func (s *subscription) committer() {
	defer s.loops.Done()
	t := time.NewTicker(s.b.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.commit(s.ctx, nil); err != nil && s.ctx.Err() == nil {
				slog.Warn("kafka: periodic commit failed; will retry", "broker", s.b.name, "err", err)
			}
		}
	}
}

// commit commits the finished offsets of parts (all when nil) that moved
// since the last commit.
func (s *subscription) commit(ctx context.Context, parts []int32) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.Crashed() {
		return nil
	}
	offsets := map[int32]kgo.EpochOffset{}
	s.mu.Lock()
	for p, eo := range s.done {
		if parts != nil && !contains(parts, p) {
			continue
		}
		if c, ok := s.committed[p]; ok && c >= eo.Offset {
			continue
		}
		offsets[p] = eo
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	var cerr error
	s.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{s.topic: offsets}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					cerr = fmt.Errorf("partition %d: %w", p.Partition, perr)
					return
				}
			}
		}
	})
	if cerr != nil {
		return s.b.errorf("commit offsets for %s: %w", s.topic, cerr)
	}
	for p, eo := range offsets {
		s.committed[p] = eo.Offset
	}
	return nil
}

func contains(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}
