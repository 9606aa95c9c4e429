package runner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/service"
	"github.com/inboxbench/inboxbench/workload"
)

// publisher sends a cell's plan to the broker: open loop at the
// workload's rate, from several goroutines that each own a share of the
// ordering keys, with the plan's send-side faults (retries, reorders,
// republishes are already in the plan) and the poison messages.
//
// A message goes out at its intended time whatever is still unconfirmed:
// the goroutines hand messages to the driver (brokers.AsyncPublisher),
// which confirms them later within its own bounded window, so a confirm's
// round trip never becomes the next message's wait. What the publisher
// itself is late by — the driver's window full, the machine busy — is the
// publish lag, recorded per message (intended → handed to the driver). A
// key's messages leave its goroutine in plan order, and the driver keeps
// the order of one goroutine's calls per key. A message that fails is
// sent again, with the same event id and intended time, from a goroutine
// of its own, so keys that did not fail go on; its key may then see a
// later version first, which the inbox parks.
type publisher struct {
	b     brokers.Broker
	topic string
	feed  *feed
	spec  *workload.Spec
	// poison bodies are sent after the first batch.
	poison [][]byte
	t      *tally
	notes  *notes
	// stop, once closed (halt), ends publishing at the next message (a
	// steady cell's window is up, a rate step's).
	stop chan struct{}
	halt func()
	// backlog, above zero, holds sending while more messages than this
	// were handed to the driver and not yet answered by the consumers; a
	// saturated steady cell's follows its consumption (backlog.go).
	backlog atomic.Int64

	sender brokers.AsyncPublisher
	// start is the zero of the intended send times (run).
	start    time.Time
	handed   atomic.Int64   // messages handed to the driver
	roomWait atomic.Int64   // ns spent waiting for the backlog to shrink
	inflight sync.WaitGroup // calls whose confirms (or retries) are pending
	fail     context.CancelCauseFunc
	// maxLag is the longest a message went out after it was due (ns);
	// lag its histogram (µs), written under lagMu.
	maxLag atomic.Int64
	lagMu  sync.Mutex
	lag    *hdrhistogram.Histogram
	// lagFrom, when set (unix ns), leaves out of lag the messages intended
	// before it (a rate step's warm-up).
	lagFrom atomic.Int64
	// intents, for a cell observed from outside (a service under test),
	// remember each event's intended time: its tables do not hold it.
	intents *service.Intents
}

// noteLagsFrom restarts the lag histogram: only messages intended from t
// on are recorded.
func (p *publisher) noteLagsFrom(t time.Time) {
	p.lagMu.Lock()
	p.lag.Reset()
	p.maxLag.Store(0)
	p.lagMu.Unlock()
	p.lagFrom.Store(t.UnixNano())
}

// maxSend bounds the messages of one PublishAsync call.
const maxSend = 256

// retryFor bounds how long a failing message is sent again: a broker
// restart must not end the run, a dead broker must.
const retryFor = 2 * time.Minute

// closedLoop publishes through a driver without AsyncPublisher: each call
// waits for its confirms, as every publisher did before drivers could
// confirm asynchronously.
type closedLoop struct{ b brokers.Broker }

// PublishAsync implements brokers.AsyncPublisher with the driver's
// Publish, confirms and all.
func (c closedLoop) PublishAsync(ctx context.Context, topic string, msgs []brokers.Message, done func([]error)) {
	errs := c.b.Publish(ctx, topic, msgs)
	go done(errs) // never on the caller's goroutine, as AsyncPublisher says
}

// newPublisher publishes the chunks of f as spec says (its rate, its
// publishers) to the cell's broker and topic, counting in the cell's
// tally.
func newPublisher(c *cell, f *feed, spec *workload.Spec) *publisher {
	stop := make(chan struct{})
	p := &publisher{b: c.b, topic: c.topic(), feed: f, spec: spec, t: c.t, notes: c.notes, lag: newHist(),
		stop: stop, halt: sync.OnceFunc(func() { close(stop) })}
	if c.svc != nil {
		p.intents = c.svc.intents
	}
	if a, ok := c.b.(brokers.AsyncPublisher); ok {
		p.sender = a
	} else {
		p.sender = closedLoop{c.b}
	}
	return p
}

// owners is how many goroutines publish: each owns the keys that hash to
// it.
func (p *publisher) owners() int { return max(1, p.spec.Publishers) }

// run sends the feed, starting at start (the zero of the intended send
// times), and returns once every message handed to the driver is
// confirmed or has failed for good.
func (p *publisher) run(ctx context.Context, start time.Time) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p.fail, p.start = cancel, start
	var wg sync.WaitGroup
	for g := range p.owners() {
		wg.Go(func() {
			if err := p.part(ctx, g); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	p.inflight.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// intendedAt is when message j of the whole stream is due at the
// workload's rate: start + j/rate.
func (p *publisher) intendedAt(j int) time.Time {
	return p.start.Add(time.Duration(float64(j) / p.spec.PublishRate * float64(time.Second)))
}

// part sends goroutine g's share of every chunk, in plan order. At a
// rate, the goroutine sleeps until its next message is due (intendedAt),
// then hands over every one of its messages due by then (never one early,
// so an event's latency, counted from its intended time, never starts
// before it could have been sent). Without a rate it sends as fast as the
// driver takes messages.
func (p *publisher) part(ctx context.Context, g int) error {
	rate := p.spec.PublishRate
	first := g == 0
	for k := 0; ; k++ {
		ch := p.feed.get(k)
		if ch == nil {
			return nil
		}
		idx := ch.own[g]
		for i := 0; i < len(idx); {
			if p.stopped() {
				return nil
			}
			n := min(maxSend, len(idx)-i)
			if rate > 0 {
				if !p.sleepUntil(ctx, p.intendedAt(ch.base+idx[i])) {
					return ctx.Err()
				}
				now := time.Now()
				n = 1
				for n < maxSend && i+n < len(idx) && !p.intendedAt(ch.base+idx[i+n]).After(now) {
					n++
				}
			} else if !p.room(ctx) {
				return ctx.Err()
			}
			if err := p.hand(ctx, ch, idx[i:i+n]); err != nil {
				return err
			}
			i += n
			if first && len(p.poison) > 0 {
				first = false
				if err := p.sendPoison(ctx); err != nil {
					return err
				}
			}
			if p.spec.Duration > 0 && time.Since(p.start) > p.spec.Duration.D() {
				return nil
			}
		}
	}
}

// hand encodes the chunk's publishes part and hands them to the driver.
func (p *publisher) hand(ctx context.Context, ch *chunk, part []int) error {
	rate := p.spec.PublishRate
	now := time.Now()
	msgs := make([]brokers.Message, len(part))
	lags := make([]time.Duration, 0, len(part))
	for i, j := range part {
		pub := ch.plan.Publishes[j]
		ev := *pub.Event
		ev.IntendedAt = now
		if rate > 0 {
			ev.IntendedAt = p.intendedAt(ch.base + j)
			if ev.IntendedAt.UnixNano() >= p.lagFrom.Load() {
				lags = append(lags, now.Sub(ev.IntendedAt))
			}
		}
		if p.intents != nil {
			p.intents.Record(ev.Subject, ev.AggregateVersion, ev.IntendedAt)
		}
		body, err := p.spec.Encode(&ev)
		if err != nil {
			return fmt.Errorf("encode %s: %w", ev.ID, err)
		}
		msgs[i] = brokers.Message{Key: pub.OrderingKey(), ID: ev.Key(), Body: body}
	}
	p.noteLags(lags)
	p.send(ctx, outgoing{msgs: msgs, mark: func(i int) { ch.sent[part[i]] = true }})
	return nil
}

// outgoing are messages handed to the driver in one call.
type outgoing struct {
	msgs []brokers.Message
	// since is when they first failed (zero the first time they go).
	since time.Time
	// mark, when not nil, marks message i confirmed.
	mark func(i int)
}

// send hands out.msgs to the driver; its confirm callback marks each
// confirmed message, records the confirm latency, and sends what failed
// again.
func (p *publisher) send(ctx context.Context, out outgoing) {
	at, msgs, mark := time.Now(), out.msgs, out.mark
	p.inflight.Add(1)
	p.handed.Add(int64(len(msgs)))
	p.sender.PublishAsync(ctx, p.topic, msgs, func(errs []error) {
		defer p.inflight.Done()
		lat := time.Since(at)
		var failed []int
		var first error
		dropped := 0
		for i, err := range errs {
			if errors.Is(err, brokers.ErrDeduplicated) {
				// Stored once already: confirmed, and never delivered,
				// so no answer is awaited for it.
				dropped++
				err = nil
			}
			if err != nil {
				failed = append(failed, i)
				if first == nil {
					first = err
				}
				continue
			}
			if mark != nil {
				mark(i)
			}
		}
		if ok := len(msgs) - len(failed); ok > 0 {
			p.t.c.published.Add(int64(ok - dropped))
			p.t.meters.recordPublish(lat, ok)
		}
		if dropped > 0 {
			p.handed.Add(-int64(dropped))
			p.t.c.brokerDeduplicated.Add(int64(dropped))
		}
		if len(failed) > 0 {
			p.t.c.publishErrors.Add(int64(len(failed)))
			p.handed.Add(-int64(len(failed)))
			p.retry(ctx, out, failed, first)
		}
	})
}

// retry sends out's failed messages again after a backoff, from a
// goroutine of their own (the callback runs on a driver's goroutine and
// must not wait), until retryFor has passed since they first failed; err
// is the first failure.
func (p *publisher) retry(ctx context.Context, out outgoing, failed []int, err error) {
	msgs, since, mark := out.msgs, out.since, out.mark
	if since.IsZero() {
		since = time.Now()
	}
	if ctx.Err() != nil || time.Since(since) > retryFor {
		p.fail(fmt.Errorf("%s: publish to %s: %d of %d messages not confirmed for %s, first: %w", p.b.Name(), p.topic, len(failed), len(msgs), retryFor, err))
		return
	}
	again := make([]brokers.Message, len(failed))
	for i, j := range failed {
		again[i] = msgs[j]
	}
	p.t.c.publishRetries.Add(1)
	p.notes.add(fmt.Sprintf("publish to %s failed, sending the failed messages again: %v", p.topic, err))
	backoff := min(200*time.Millisecond<<min(int(time.Since(since)/time.Second), 5), 5*time.Second)
	p.inflight.Add(1)
	go func() {
		defer p.inflight.Done()
		if !ctxtime.Sleep(ctx, backoff) {
			p.fail(ctx.Err())
			return
		}
		var remark func(int)
		if mark != nil {
			remark = func(i int) { mark(failed[i]) }
		}
		p.send(ctx, outgoing{msgs: again, since: since, mark: remark})
	}()
}

// noteLags records how late each message was handed over.
func (p *publisher) noteLags(lags []time.Duration) {
	if len(lags) == 0 {
		return
	}
	p.lagMu.Lock()
	for _, d := range lags {
		p.lag.RecordValue(micros(max(d, 0)))
		if int64(d) > p.maxLag.Load() {
			p.maxLag.Store(int64(d))
		}
	}
	p.lagMu.Unlock()
}

// mergeLag adds the publish lag's histogram to the cell's.
func (p *publisher) mergeLag(ms *meters) {
	p.lagMu.Lock()
	defer p.lagMu.Unlock()
	if !ms.enabled {
		return
	}
	ms.pubMu.Lock()
	ms.lag.Merge(p.lag)
	ms.pubMu.Unlock()
}

// lagSummary is the publish lag so far.
func (p *publisher) lagSummary() results.Summary {
	p.lagMu.Lock()
	defer p.lagMu.Unlock()
	return summary(p.lag)
}

// stopped reports whether publishing was told to end.
func (p *publisher) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// sleepUntil waits until t, or until ctx ends (false) or publishing is
// stopped (true: the caller then sees stopped).
func (p *publisher) sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-p.stop:
		return true
	case <-timer.C:
		return true
	}
}

// room waits while the backlog bound is reached: more messages handed to
// the driver than answered by the consumers, by more than p.backlog.
func (p *publisher) room(ctx context.Context) bool {
	full := func() bool {
		b := p.backlog.Load()
		return b > 0 && p.handed.Load()-p.t.handled.Load() > b
	}
	if !full() {
		return ctx.Err() == nil
	}
	since := time.Now()
	defer func() { p.roomWait.Add(int64(time.Since(since))) }()
	for full() {
		if p.stopped() {
			return true
		}
		if !ctxtime.Sleep(ctx, time.Millisecond) {
			return false
		}
	}
	return ctx.Err() == nil
}

// sendPoison sends the malformed bodies after the first batch, so they sit
// in the middle of the stream.
func (p *publisher) sendPoison(ctx context.Context) error {
	msgs := make([]brokers.Message, len(p.poison))
	for i, body := range p.poison {
		msgs[i] = brokers.Message{Key: fmt.Sprintf("poison-%d", i), ID: fmt.Sprintf("poison-%d", i), Body: body}
	}
	p.send(ctx, outgoing{msgs: msgs})
	return nil
}

// feed is what a publisher sends: one plan, or the chunks of a stream
// without an end (workload.Stream), each split once among the
// publisher's goroutines by ordering key.
type feed struct {
	mu     sync.Mutex
	chunks []*chunk
	next   func() *workload.Plan // nil: no chunk after those in chunks
	owners int
	sends  int // sends of the chunks so far
}

// chunk is one plan of a feed and what of it was confirmed.
type chunk struct {
	plan *workload.Plan
	base int     // index of its first send in the whole feed
	own  [][]int // per goroutine, its sends (indexes into plan.Publishes) in order
	sent []bool  // sent[j]: plan.Publishes[j] was confirmed
}

func planFeed(p *workload.Plan, owners int) *feed {
	f := &feed{owners: owners}
	f.add(p)
	return f
}

func streamFeed(s *workload.Stream, owners int) *feed {
	return &feed{owners: owners, next: s.Next}
}

func (f *feed) add(p *workload.Plan) *chunk {
	ch := &chunk{plan: p, base: f.sends, own: make([][]int, f.owners), sent: make([]bool, len(p.Publishes))}
	for j := range p.Publishes {
		h := fnv.New32a()
		h.Write([]byte(p.Publishes[j].OrderingKey()))
		g := int(h.Sum32() % uint32(f.owners))
		ch.own[g] = append(ch.own[g], j)
	}
	f.sends += len(p.Publishes)
	f.chunks = append(f.chunks, ch)
	return ch
}

// get returns chunk k, generating it when the stream has not reached it
// yet; nil past the end.
func (f *feed) get(k int) *chunk {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.chunks) <= k {
		if f.next == nil {
			return nil
		}
		p := f.next()
		if p == nil {
			return nil
		}
		f.add(p)
	}
	return f.chunks[k]
}

// total is the sends of the chunks generated so far.
func (f *feed) total() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(f.sends)
}

// published is the plan of what was confirmed, and whether that is the
// whole of a fixed plan (false: publishing was cut short, or the feed is
// a stream).
func (f *feed) published() (*workload.Plan, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.chunks) == 1 && f.next == nil {
		ch := f.chunks[0]
		for _, s := range ch.sent {
			if !s {
				return ch.plan.Published(ch.sent), false
			}
		}
		return ch.plan, true
	}
	plans := make([]*workload.Plan, len(f.chunks))
	var sent []bool
	for i, ch := range f.chunks {
		plans[i] = ch.plan
		sent = append(sent, ch.sent...)
	}
	return workload.Concat(plans).Published(sent), false
}
