// Package brokerbench is the raw transport benchmark of the broker drivers
// (no database): closed-loop publishing with confirms, and a counting
// consumer that records publish→handler latency. It is the measuring core
// shared by the driver benchmarks (brokers/brokertest.Bench, a testing.B
// adapter) and `bench calibrate`, which compares each driver with the
// broker vendor's own perf tool on the same shape.
//
// A run is made of two parts that callers combine:
//
//   - Publish sends envelope messages of Options.Size bytes from
//     Options.Publishers goroutines, each publishing Options.Batch
//     messages per call and waiting for their confirms, until a message
//     count or a duration is reached. It records confirmed messages per
//     second.
//   - StartConsumer subscribes with a handler that acks everything, counts
//     deliveries (per second, first and last) and records latency from the
//     publish time carried in a header.
//
// "Live" is a consumer started before publishing (end-to-end rate and
// latency); "drain" is a consumer started after publishing (the consume
// side's ceiling, without the publisher's confirms in the loop).
package brokerbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
)

// Options shape a run.
type Options struct {
	Size       int // message size in bytes (envelope with padding); default 1024
	Shards     int // queues/partitions; default 8
	Keys       int // distinct ordering keys; default 64
	Batch      int // messages per Publish call; default 100
	Publishers int // concurrent publishing goroutines; default 4
	Prefetch   int // SubscribeOptions.Prefetch; default 256 (raised to MaxBatch)
	MaxBatch   int // SubscribeOptions.MaxBatch; default 1
	// NoLatency publishes without SentHeader: no latency figures, and one
	// header less to send, store, fetch and decode per message. A drain
	// measured after publishing (bench calibrate) has no use for them,
	// and the vendor tools it is compared with send no such header.
	NoLatency bool
	// Rate is the open-loop rate of PublishAtRate, in messages per
	// second; Publish, closed loop, ignores it.
	Rate float64
}

// Topic is a driver's topic (set up already) that a run publishes to or
// consumes from.
type Topic struct {
	Broker brokers.Broker
	Name   string
}

// WithDefaults fills zero fields with the defaults above.
func (o Options) WithDefaults() Options {
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

// SentHeader carries the publish time (unix ns) for the latency figure; it
// is read from headers so no JSON is decoded on the hot path.
const SentHeader = "bench-sent-ns"

// bodyPool is how many distinct bodies Publish cycles through: more than
// fit in a compressor's window (snappy: 64 KiB), so a batch of them does
// not compress.
const bodyPool = 256

// Bodies builds n envelope bodies of about size bytes each (the other
// attributes are ~250 bytes), padded with random letters that differ from
// body to body. Identical or repetitive bodies would let a client that
// compresses batches (franz-go: snappy by default) send a fraction of the
// bytes, which no real stream of distinct events allows and which the
// vendor perf tools (uncompressed) do not do.
func Bodies(size, n int) ([][]byte, error) {
	rng := rand.New(rand.NewPCG(1, uint64(size)))
	out := make([][]byte, n)
	pad := make([]byte, max(0, size-250))
	for i := range out {
		for j := range pad {
			pad[j] = byte('A' + rng.IntN(26))
		}
		e := &envelope.Event{
			Source:           "inboxbench/brokerbench",
			ID:               "bench-" + strconv.Itoa(i),
			Type:             "brokerbench.increment",
			Time:             time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
			Subject:          "bench",
			AggregateVersion: 1,
			Kind:             envelope.Increment,
			Amount:           1,
			Data:             string(pad),
		}
		body, err := envelope.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("build the benchmark messages: %w", err)
		}
		out[i] = body
	}
	return out, nil
}

// Series counts events per whole second since its start. Add is safe for
// concurrent use; it takes a short lock, so call it once per batch.
type Series struct {
	start time.Time
	mu    sync.Mutex
	n     []int64
}

// NewSeries starts a series now.
func NewSeries() *Series { return &Series{start: time.Now()} }

// Start is when the series began.
func (s *Series) Start() time.Time { return s.start }

// Add counts n events at time at.
func (s *Series) Add(at time.Time, n int64) {
	i := int(at.Sub(s.start) / time.Second)
	if i < 0 {
		i = 0
	}
	s.mu.Lock()
	for len(s.n) <= i {
		s.n = append(s.n, 0)
	}
	s.n[i] += n
	s.mu.Unlock()
}

// PerSecond returns a copy of the counts, one per second from the start.
func (s *Series) PerSecond() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.n...)
}

// Limit ends a Publish: after Messages messages (when > 0), or once
// Duration has passed (when > 0), whichever comes first.
type Limit struct {
	Messages int64
	Duration time.Duration
}

// PublishResult is what Publish measured.
type PublishResult struct {
	Messages int64         // confirmed messages
	Elapsed  time.Duration // from the first send to the last confirm
	Series   *Series       // confirmed messages per second from the first send
}

// Rate is confirmed messages per second over the whole publish.
func (r PublishResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

// RateAfter is confirmed messages per second from warmup on to the end of
// the publish: the figure without client start-up and JVM-style warm-up.
// With a publish shorter than warmup it is the whole-run rate.
func (r PublishResult) RateAfter(warmup time.Duration) float64 {
	secs := r.Series.PerSecond()
	skip := int(warmup / time.Second)
	if warmup <= 0 || len(secs) <= skip+1 || r.Elapsed <= warmup {
		return r.Rate()
	}
	var n int64
	for _, v := range secs[skip:] {
		n += v
	}
	return float64(n) / (r.Elapsed - time.Duration(skip)*time.Second).Seconds()
}

// Messages are the messages of a run: message i has the key
// "key-<i mod Keys>", the id "<IDPrefix>-<i>" and the body
// Bodies[i mod len(Bodies)]. `bench calibrate` shapes the vendor tools'
// messages after them.
type Messages struct {
	IDPrefix string
	Keys     int
	Bodies   [][]byte
}

// At is message i, with the send time sent (unix ns, decimal) in
// SentHeader unless sent is "" (Options.NoLatency).
func (ms Messages) At(i int64, sent string) brokers.Message {
	m := brokers.Message{
		Key:  "key-" + strconv.Itoa(int(i%int64(ms.Keys))),
		ID:   ms.IDPrefix + "-" + strconv.FormatInt(i, 10),
		Body: ms.Bodies[i%int64(len(ms.Bodies))],
	}
	if sent != "" {
		m.Headers = map[string]string{SentHeader: sent}
	}
	return m
}

// Publish sends messages to t until lim, from o.Publishers goroutines
// each sending o.Batch messages per call and waiting for every confirm
// (closed loop). Message i is the Messages of idPrefix's At(i): every
// message carries its send time in SentHeader unless o.NoLatency. The
// first unconfirmed message ends the publish with an error.
func (t Topic) Publish(ctx context.Context, idPrefix string, o Options, lim Limit) (PublishResult, error) {
	o = o.WithDefaults()
	if lim.Messages <= 0 && lim.Duration <= 0 {
		return PublishResult{}, errors.New("brokerbench: Publish needs a message count or a duration")
	}
	ms, err := o.messages(idPrefix)
	if err != nil {
		return PublishResult{}, err
	}
	br := t.Broker
	total := lim.Messages
	if total <= 0 {
		total = 1 << 62
	}
	var deadline time.Time
	series := NewSeries()
	if lim.Duration > 0 {
		deadline = series.Start().Add(lim.Duration)
	}
	var (
		wg        sync.WaitGroup
		next      atomic.Int64
		confirmed atomic.Int64
		lastMu    sync.Mutex
		last      time.Time
		errOnce   sync.Once
		firstErr  error
	)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for p := 0; p < o.Publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]brokers.Message, 0, o.Batch)
			for pctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
				first := next.Add(int64(o.Batch)) - int64(o.Batch)
				if first >= total {
					return
				}
				batch = batch[:0]
				now := ""
				if !o.NoLatency {
					now = strconv.FormatInt(time.Now().UnixNano(), 10)
				}
				for i := first; i < min(first+int64(o.Batch), total); i++ {
					batch = append(batch, ms.At(i, now))
				}
				if err := brokers.FirstError(br.Publish(pctx, t.Name, batch)); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				at := time.Now()
				confirmed.Add(int64(len(batch)))
				series.Add(at, int64(len(batch)))
				lastMu.Lock()
				if at.After(last) {
					last = at
				}
				lastMu.Unlock()
			}
		}()
	}
	wg.Wait()
	res := PublishResult{Messages: confirmed.Load(), Series: series}
	if !last.IsZero() {
		res.Elapsed = last.Sub(series.Start())
	}
	if firstErr != nil {
		return res, fmt.Errorf("%s: publish to %s: %w", br.Name(), t.Name, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("%s: publish to %s: %w", br.Name(), t.Name, err)
	}
	return res, nil
}

// messages are the run's messages with ids after idPrefix: o.Keys keys
// over bodyPool bodies of o.Size bytes.
func (o Options) messages(idPrefix string) (Messages, error) {
	bodies, err := Bodies(o.Size, bodyPool)
	return Messages{IDPrefix: idPrefix, Keys: o.Keys, Bodies: bodies}, err
}
