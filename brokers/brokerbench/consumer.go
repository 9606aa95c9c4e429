package brokerbench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/inboxbench/inboxbench/brokers"
)

// Consumer is a running subscription that acks every delivery and counts
// them. Histograms are kept per shard (a batch is one shard's), merged
// when read, so shards share no lock on the hot path.
type Consumer struct {
	sub    brokers.Subscription
	want   int64
	series *Series
	all    chan struct{}

	received atomic.Int64
	first    atomic.Int64 // unix ns of the first delivery, 0 before
	last     atomic.Int64 // unix ns of the latest delivery

	// clock is the time (unix ns) at most a millisecond ago, kept by a
	// ticker until Close: the per-second counts and the latest delivery
	// read it instead of calling time.Now on every delivery, which took a
	// twentieth of a drain's CPU here. The first delivery and the one that
	// completes want read the precise time.
	clock     atomic.Int64
	stopClock context.CancelFunc

	latency bool // record latencies (not Options.NoLatency)
	hmu     sync.Mutex
	hists   map[string]*shardHist
}

// shardHist is a shard's publish→handler latencies (µs) and handler-call
// batch sizes.
type shardHist struct {
	mu    sync.Mutex
	h     *hdrhistogram.Histogram
	sizes *hdrhistogram.Histogram
}

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
}

// StartConsumer subscribes to t as group with o's Prefetch and MaxBatch;
// Wait returns once want deliveries arrived. The subscription's start-up
// counts from this call (Result.Series starts here).
func (t Topic) StartConsumer(ctx context.Context, group string, o Options, want int64) (*Consumer, error) {
	o = o.WithDefaults()
	c := &Consumer{want: want, series: NewSeries(), all: make(chan struct{}), latency: !o.NoLatency, hists: map[string]*shardHist{}}
	c.startClock()
	sub, err := t.Broker.Subscribe(ctx, t.Name, group, brokers.SubscribeOptions{Prefetch: o.Prefetch, MaxBatch: o.MaxBatch}, c.handle)
	if err != nil {
		c.stopClock()
		return nil, fmt.Errorf("%s: subscribe to %s: %w", t.Broker.Name(), t.Name, err)
	}
	c.sub = sub
	return c, nil
}

func (c *Consumer) startClock() {
	c.clock.Store(time.Now().UnixNano())
	t := time.NewTicker(time.Millisecond)
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				c.clock.Store(now.UnixNano())
			case <-ctx.Done():
				return
			}
		}
	}()
	c.stopClock = stop
}

func (c *Consumer) handle(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
	now := c.clock.Load()
	if c.first.Load() == 0 {
		now = time.Now().UnixNano()
		c.first.CompareAndSwap(0, now)
	}
	// Exactly one call crosses want, whatever its batch size.
	n := c.received.Add(int64(len(ds)))
	done := n >= c.want && n-int64(len(ds)) < c.want
	if done {
		now = time.Now().UnixNano()
	}
	if c.latency {
		c.record(ds)
	}
	c.series.Add(time.Unix(0, now), int64(len(ds)))
	for {
		l := c.last.Load()
		if l >= now || c.last.CompareAndSwap(l, now) {
			break
		}
	}
	if done {
		close(c.all)
	}
	return make([]brokers.Verdict, len(ds)) // all Ack (the zero Verdict)
}

// record adds the batch's size and its publish→handler latencies (from
// the time in SentHeader) to its shard's histograms.
func (c *Consumer) record(ds []*brokers.Delivery) {
	c.hmu.Lock() // short: finds the shard's histogram, whose own lock is uncontended
	h := c.hists[ds[0].Shard]
	if h == nil {
		h = &shardHist{h: newHist(), sizes: hdrhistogram.New(1, 1<<20, 3)}
		c.hists[ds[0].Shard] = h
	}
	c.hmu.Unlock()
	now := time.Now()
	h.mu.Lock()
	_ = h.sizes.RecordValue(int64(len(ds)))
	for _, d := range ds {
		if sent, err := strconv.ParseInt(d.Headers[SentHeader], 10, 64); err == nil {
			_ = h.h.RecordValue(max(1, now.Sub(time.Unix(0, sent)).Microseconds()))
		}
	}
	h.mu.Unlock()
}

// Wait blocks until want deliveries arrived, the subscription ended, ctx
// ended, or no delivery came for idle (when > 0). Its error says how many
// of want arrived.
func (c *Consumer) Wait(ctx context.Context, idle time.Duration) error {
	var tick <-chan time.Time
	if idle > 0 {
		t := time.NewTicker(min(idle/4, time.Second))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.all:
			return nil
		case <-c.sub.Done():
			return fmt.Errorf("the subscription ended after %d of %d deliveries: %v", c.received.Load(), c.want, c.sub.Err())
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d deliveries arrived: %w", c.received.Load(), c.want, ctx.Err())
		case <-tick:
			since := c.series.Start()
			if l := c.last.Load(); l > 0 {
				since = time.Unix(0, l)
			}
			if time.Since(since) > idle {
				return fmt.Errorf("only %d of %d deliveries arrived, none for %v", c.received.Load(), c.want, idle)
			}
		}
	}
}

// Close stops the subscription.
func (c *Consumer) Close() error {
	c.stopClock()
	return c.sub.Close()
}

// ConsumeResult is what a Consumer counted.
type ConsumeResult struct {
	Messages int64
	// Startup is from StartConsumer to the first delivery (group join,
	// rebalance, first fetch).
	Startup time.Duration
	// Span is from the first delivery to the last.
	Span   time.Duration
	Series *Series // deliveries per second from StartConsumer
	// Latency is publish→handler, µs, from the time in SentHeader: the
	// send time when publishing closed loop (Publish), the due time at a
	// rate (PublishAtRate). Empty with Options.NoLatency.
	Latency Quantiles
	// Batches is the sizes of the handler calls, in deliveries (empty
	// with Options.NoLatency, like Latency).
	Batches Quantiles
}

// Rate is deliveries per second from the first delivery to the last: the
// consume rate without the subscription's start-up. Zero with fewer than
// two handler calls.
func (r ConsumeResult) Rate() float64 {
	if r.Span <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Span.Seconds()
}

// Result reads the counters so far.
func (c *Consumer) Result() ConsumeResult {
	r := ConsumeResult{Messages: c.received.Load(), Series: c.series}
	if f := c.first.Load(); f > 0 {
		r.Startup = time.Unix(0, f).Sub(c.series.Start())
		r.Span = time.Duration(c.last.Load() - f)
	}
	merged, sizes := newHist(), hdrhistogram.New(1, 1<<20, 3)
	c.hmu.Lock()
	for _, h := range c.hists {
		h.mu.Lock()
		merged.Merge(h.h)
		sizes.Merge(h.sizes)
		h.mu.Unlock()
	}
	c.hmu.Unlock()
	r.Latency, r.Batches = Summarize(merged), Summarize(sizes)
	return r
}
