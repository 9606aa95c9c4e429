package brokertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers/brokerbench"
)

// BenchOptions shape the raw transport benchmark: the run's
// brokerbench.Options (the same type bench calibrate runs with), and
// whether it preloads. A Rate publishes open loop at that many messages
// per second (brokerbench.Topic.PublishAtRate: each message sent at its due
// time through PublishAsync, whatever is unconfirmed) instead of closed
// loop; latency then counts from the due time, and the publisher's lag
// and confirm latency are reported too.
type BenchOptions struct {
	brokerbench.Options
	// Preload publishes everything before subscribing and times only the
	// consumption (subscription start-up included): the consumer side's
	// ceiling, where batching shows, without the publisher's confirms in
	// the loop. No latency figures then.
	Preload bool
}

// Bench is the raw transport benchmark (no database), a testing.B adapter
// of brokerbench: b.N messages of o.Size bytes are published (closed loop,
// batches with confirms) while one subscription acks them in handler
// batches of up to o.MaxBatch; it reports msgs/s end to end and the
// publish→handler latency p50/p99 in microseconds. Topic setup and
// subscription start-up are excluded from the timing (with o.Preload the
// publishing is, and start-up is not; see BenchOptions). Use
// -benchtime=NNNNx for stable figures: each b.N round creates a topic.
func Bench(b *testing.B, newBroker NewBroker, o BenchOptions) {
	co := o.WithDefaults()
	br := newBroker(b)
	topic := UniqueName(b, "bench")
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := br.Setup(ctx, topic, co.Shards); err != nil {
		b.Fatalf("%s: setup: %v", br.Name(), err)
	}
	cleanupTopic(b, br, topic)
	t := brokerbench.Topic{Broker: br, Name: topic}
	total := int64(b.N)
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer pcancel()
	var rate brokerbench.RateResult
	publish := func() {
		var err error
		if o.Rate > 0 {
			rate, err = t.PublishAtRate(pctx, "bench", co, brokerbench.Limit{Messages: total})
		} else {
			_, err = t.Publish(pctx, "bench", co, brokerbench.Limit{Messages: total})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	consume := func() *brokerbench.Consumer {
		c, err := t.StartConsumer(ctx, UniqueName(b, "g"), co, total)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}

	b.SetBytes(int64(co.Size))
	var c *brokerbench.Consumer
	var start time.Time
	if o.Preload {
		publish()
		b.ResetTimer()
		start = time.Now()
		c = consume()
	} else {
		c = consume()
		b.ResetTimer()
		start = time.Now()
		publish()
	}
	defer c.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer wcancel()
	if err := c.Wait(wctx, 0); err != nil {
		b.Fatalf("%s: %v", br.Name(), err)
	}
	elapsed := time.Since(start)
	b.StopTimer()

	res := c.Result()
	b.ReportMetric(float64(total)/elapsed.Seconds(), "msgs/s")
	if !o.Preload { // preloaded messages waited in the queue by design
		b.ReportMetric(float64(res.Latency.P50), "p50-µs")
		b.ReportMetric(float64(res.Latency.P99), "p99-µs")
	}
	if o.Rate > 0 {
		b.ReportMetric(float64(res.Latency.P90), "p90-µs")
		b.ReportMetric(float64(res.Latency.P999), "p999-µs")
		b.ReportMetric(float64(res.Latency.Max), "max-µs")
		b.ReportMetric(float64(rate.Lag.P99), "lag-p99-µs")
		b.ReportMetric(float64(rate.Confirm.P50), "confirm-p50-µs")
		b.ReportMetric(float64(rate.Confirm.P99), "confirm-p99-µs")
		b.ReportMetric(float64(res.Batches.P50), "batch-p50")
		b.ReportMetric(float64(res.Batches.Max), "batch-max")
		b.Logf("%s at %.0f msgs/s, MaxBatch %d, %d messages: publish→handler from the due time µs %v; lag µs %v; confirm µs %v; handler batches %v",
			br.Name(), o.Rate, co.MaxBatch, total, res.Latency, rate.Lag, rate.Confirm, res.Batches)
	}
	b.ReportMetric(0, "ns/op") // per-op time is meaningless here: see msgs/s
}

// BenchRate runs Bench open loop once per rate in rates, as
// sub-benchmarks named "Rate=N": b.N messages at N per second (use
// -benchtime=NNNNx: a run lasts b.N/N seconds).
func BenchRate(b *testing.B, newBroker NewBroker, o BenchOptions, rates ...float64) {
	for _, r := range rates {
		o := o
		o.Rate = r
		b.Run("Rate="+strconv.FormatFloat(r, 'f', -1, 64), func(b *testing.B) { Bench(b, newBroker, o) })
	}
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

// Raw1KiB is every driver's BenchmarkRaw1KiB: 1 KiB messages published
// closed loop while one subscription acks them, with MaxBatch 1 and 100.
func Raw1KiB(b *testing.B, newBroker NewBroker) {
	BenchMaxBatch(b, newBroker, BenchOptions{Options: brokerbench.Options{Size: 1024}}, 1, 100)
}

// Rate1KiB is every driver's BenchmarkRate1KiB: it publishes open loop at
// low rates with handler batches of up to 500, so a driver that waited to
// fill a batch, or whose fetch lingered, shows it in the batch sizes and
// the latency from the due time.
func Rate1KiB(b *testing.B, newBroker NewBroker) {
	BenchRate(b, newBroker, BenchOptions{Options: brokerbench.Options{Size: 1024, MaxBatch: 500}}, 200, 2000)
}

// Drain1KiB is every driver's BenchmarkDrain1KiB: it times consuming a
// preloaded backlog, the consumer side alone, where MaxBatch shows.
func Drain1KiB(b *testing.B, newBroker NewBroker) {
	BenchMaxBatch(b, newBroker, BenchOptions{Options: brokerbench.Options{Size: 1024}, Preload: true}, 1, 100)
}
