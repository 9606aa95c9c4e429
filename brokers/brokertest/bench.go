package brokertest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/inboxbench/inboxbench/brokers"
)

// BenchOptions shape the raw transport benchmark.
type BenchOptions struct {
	Size       int // message size in bytes (envelope with padding); default 1024
	Shards     int // queues/partitions; default 8
	Keys       int // distinct ordering keys; default 64
	Batch      int // messages per Publish call; default 100
	Publishers int // concurrent publishing goroutines; default 4
	Prefetch   int // SubscribeOptions.Prefetch; default 256 (raised to MaxBatch)
	MaxBatch   int // SubscribeOptions.MaxBatch; default 1
	// Preload publishes everything before subscribing and times only the
	// consumption (subscription start-up included): the consumer side's
	// ceiling, where batching shows, without the publisher's confirms in
	// the loop. No latency figures then.
	Preload bool
}

func (o BenchOptions) withDefaults() BenchOptions {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Size, 1024)
	def(&o.Shards, 8)
	def(&o.Keys, 64)
	def(&o.Batch, 100)
	def(&o.Publishers, 4)
	def(&o.Prefetch, 256)
	def(&o.MaxBatch, 1)
	return o
}

type shardHist struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// sentHeader carries the publish time (unix ns) for the latency figure; it
// is read from headers so no JSON is decoded on the hot path.
const sentHeader = "bench-sent-ns"

// Bench is the raw transport benchmark (no database): b.N messages of
// o.Size bytes are published (closed loop, batches with confirms) while one
// subscription acks them in handler batches of up to o.MaxBatch; it
// reports msgs/s end to end and the publish→handler latency p50/p99 in
// microseconds from HdrHistogram (one histogram per shard, merged at the
// end; no lock shared by shards on the hot path). Topic setup and
// subscription start-up are excluded from the timing (with o.Preload the
// publishing is, and start-up is not; see BenchOptions). Use
// -benchtime=NNNNx for stable figures: each b.N round creates a topic.
func Bench(b *testing.B, newBroker NewBroker, o BenchOptions) {
	o = o.withDefaults()
	br := newBroker(b)
	topic := UniqueName(b, "bench")
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := br.Setup(ctx, topic, o.Shards); err != nil {
		b.Fatalf("%s: setup: %v", br.Name(), err)
	}
	cleanupTopic(b, br, topic)
	template := Event(b, "bench", 0, 1, 0, o.Size)

	var (
		hmu      sync.Mutex
		hists    = map[string]*shardHist{}
		received atomic.Int64
		all      = make(chan struct{})
		total    = int64(b.N)
	)
	handler := func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
		// A batch is one shard's: one histogram lookup per call.
		hmu.Lock() // short: finds the shard's histogram, whose own lock is uncontended
		h := hists[ds[0].Shard]
		if h == nil {
			h = &shardHist{h: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)}
			hists[ds[0].Shard] = h
		}
		hmu.Unlock()
		now := time.Now()
		h.mu.Lock()
		for _, d := range ds {
			if sent, err := strconv.ParseInt(d.Headers[sentHeader], 10, 64); err == nil {
				_ = h.h.RecordValue(max(1, now.Sub(time.Unix(0, sent)).Microseconds()))
			}
		}
		h.mu.Unlock()
		// Exactly one call crosses total, whatever its batch size.
		if n := received.Add(int64(len(ds))); n >= total && n-int64(len(ds)) < total {
			close(all)
		}
		return make([]brokers.Verdict, len(ds)) // all Ack (the zero Verdict)
	}
	subscribe := func() brokers.Subscription {
		sub, err := br.Subscribe(ctx, topic, UniqueName(b, "g"), brokers.SubscribeOptions{Prefetch: o.Prefetch, MaxBatch: o.MaxBatch}, handler)
		if err != nil {
			b.Fatalf("%s: subscribe: %v", br.Name(), err)
		}
		return sub
	}
	publishAll := func() error {
		var wg sync.WaitGroup
		var next atomic.Int64
		errc := make(chan error, o.Publishers)
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer pcancel()
		for p := 0; p < o.Publishers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				batch := make([]brokers.Message, 0, o.Batch)
				for {
					first := next.Add(int64(o.Batch)) - int64(o.Batch)
					if first >= total {
						return
					}
					batch = batch[:0]
					now := strconv.FormatInt(time.Now().UnixNano(), 10)
					for i := first; i < min(first+int64(o.Batch), total); i++ {
						m := template
						m.Key = "key-" + strconv.Itoa(int(i)%o.Keys)
						m.ID = "bench-" + strconv.FormatInt(i, 10)
						m.Headers = map[string]string{sentHeader: now}
						batch = append(batch, m)
					}
					if err := brokers.FirstError(br.Publish(pctx, topic, batch)); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-errc:
			return err
		default:
			return nil
		}
	}

	b.SetBytes(int64(o.Size))
	var sub brokers.Subscription
	var start time.Time
	if o.Preload {
		if err := publishAll(); err != nil {
			b.Fatalf("%s: preload: %v", br.Name(), err)
		}
		b.ResetTimer()
		start = time.Now()
		sub = subscribe()
	} else {
		sub = subscribe()
		b.ResetTimer()
		start = time.Now()
		if err := publishAll(); err != nil {
			b.Fatalf("%s: publish: %v", br.Name(), err)
		}
	}
	defer sub.Close()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%s: only %d of %d messages consumed within 2 minutes of the last publish", br.Name(), received.Load(), total)
	}
	elapsed := time.Since(start)
	b.StopTimer()

	merged := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	hmu.Lock()
	for _, h := range hists {
		h.mu.Lock()
		merged.Merge(h.h)
		h.mu.Unlock()
	}
	hmu.Unlock()
	b.ReportMetric(float64(total)/elapsed.Seconds(), "msgs/s")
	if !o.Preload { // preloaded messages waited in the queue by design
		b.ReportMetric(float64(merged.ValueAtQuantile(50)), "p50-µs")
		b.ReportMetric(float64(merged.ValueAtQuantile(99)), "p99-µs")
	}
	b.ReportMetric(0, "ns/op") // per-op time is meaningless here: see msgs/s
}

// BenchMaxBatch runs Bench once per MaxBatch in maxBatches, as
// sub-benchmarks named "MaxBatch=N", so one run shows what batch delivery
// gains on the transport alone.
func BenchMaxBatch(b *testing.B, newBroker NewBroker, o BenchOptions, maxBatches ...int) {
	for _, n := range maxBatches {
		o := o
		o.MaxBatch = n
		b.Run("MaxBatch="+strconv.Itoa(n), func(b *testing.B) { Bench(b, newBroker, o) })
	}
}
