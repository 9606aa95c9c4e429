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
	Prefetch   int // SubscribeOptions.Prefetch; default 256
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
// subscription acks them; it reports msgs/s end to end and the
// publish→handler latency p50/p99 in microseconds from HdrHistogram (one
// histogram per shard, merged at the end; no lock shared by shards on the
// hot path). Topic setup and subscription start-up are excluded from the
// timing. Use -benchtime=NNNNx for stable figures: each b.N round creates a
// topic.
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
	handler := func(_ context.Context, d *brokers.Delivery) brokers.Verdict {
		sent, err := strconv.ParseInt(d.Headers[sentHeader], 10, 64)
		if err == nil {
			lat := max(1, time.Since(time.Unix(0, sent)).Microseconds())
			hmu.Lock() // short: finds the shard's histogram, whose own lock is uncontended
			h := hists[d.Shard]
			if h == nil {
				h = &shardHist{h: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)}
				hists[d.Shard] = h
			}
			hmu.Unlock()
			h.mu.Lock()
			_ = h.h.RecordValue(lat)
			h.mu.Unlock()
		}
		if received.Add(1) == total {
			close(all)
		}
		return brokers.Ack
	}
	sub, err := br.Subscribe(ctx, topic, UniqueName(b, "g"), brokers.SubscribeOptions{Prefetch: o.Prefetch}, handler)
	if err != nil {
		b.Fatalf("%s: subscribe: %v", br.Name(), err)
	}
	defer sub.Close()

	b.SetBytes(int64(o.Size))
	b.ResetTimer()
	start := time.Now()
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
		b.Fatalf("%s: publish: %v", br.Name(), err)
	default:
	}
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
	b.ReportMetric(float64(merged.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(merged.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(0, "ns/op") // per-op time is meaningless here: see msgs/s
}
