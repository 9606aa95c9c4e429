package brokerbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/inboxbench/inboxbench/brokers"
)

// Quantiles summarize a histogram: latencies in microseconds, batch sizes
// in messages.
type Quantiles struct {
	Count                    int64
	P50, P90, P99, P999, Max int64
}

// Summarize reads h's quantiles.
func Summarize(h *hdrhistogram.Histogram) Quantiles {
	return Quantiles{Count: h.TotalCount(), P50: h.ValueAtQuantile(50), P90: h.ValueAtQuantile(90),
		P99: h.ValueAtQuantile(99), P999: h.ValueAtQuantile(99.9), Max: h.Max()}
}

// String shows the quantiles and the count on one line.
func (q Quantiles) String() string {
	return fmt.Sprintf("p50 %d p90 %d p99 %d p999 %d max %d (n %d)", q.P50, q.P90, q.P99, q.P999, q.Max, q.Count)
}

// RateResult is what PublishAtRate measured.
type RateResult struct {
	Rate     float64       // messages per second asked for
	Messages int64         // confirmed messages
	Failed   int64         // messages whose done reported an error
	Calls    int64         // PublishAsync calls
	Elapsed  time.Duration // from the start to the last done
	// Lag is from a message's due time to its hand-over (PublishAsync
	// returned), µs: how late the publisher sent it. Confirm is from the
	// hand-over to the call's done, µs: the transport's send→confirm
	// latency while others are unconfirmed.
	Lag, Confirm Quantiles
}

// PublishAtRate publishes open loop to t at o.Rate messages per second
// until lim: message i is due at start + i/rate and is handed to the
// driver's PublishAsync at its due time whatever is still unconfirmed, by
// one of o.Publishers goroutines (publisher g sends i = g, g+P, …), in
// calls of the messages already due (at most o.Batch: a call carries more
// than one only while its publisher is behind). SentHeader carries the
// due time, so a consumer's latency counts from when the message should
// have gone (no coordinated omission). The first failed message ends the
// publish with an error after every done came.
func (t Topic) PublishAtRate(ctx context.Context, idPrefix string, o Options, lim Limit) (RateResult, error) {
	o = o.WithDefaults()
	r, err := newRateRun(t, idPrefix, o, lim)
	if err != nil {
		return RateResult{Rate: o.Rate}, err
	}
	for g := range o.Publishers {
		r.pubs.Add(1)
		go r.publisher(ctx, g)
	}
	r.pubs.Wait()
	r.calls.Wait() // every done comes: ctx's end fails what is unconfirmed
	return r.result(ctx)
}

// rateRun is the state of one PublishAtRate.
type rateRun struct {
	t        Topic
	ap       brokers.AsyncPublisher
	o        Options
	ms       Messages
	total    int64     // messages to publish
	start    time.Time // message i is due at start + i*interval
	interval float64   // ns

	pubs, calls       sync.WaitGroup // publishers, PublishAsync calls
	confirmed, failed atomic.Int64
	ncalls            atomic.Int64
	lastDone          atomic.Int64 // unix ns of the latest done
	lags              []*hdrhistogram.Histogram
	cmu               sync.Mutex // guards confirm
	confirm           *hdrhistogram.Histogram
	stop              chan struct{} // closed by the first failure
	stopOnce          sync.Once
	errOnce           sync.Once
	firstErr          error
}

// rateCall is one PublishAsync call: whichever of its return and its done
// comes second records the confirm latency.
type rateCall struct {
	n             int
	handed, doneT atomic.Int64
	second        atomic.Bool
}

func newRateRun(t Topic, idPrefix string, o Options, lim Limit) (*rateRun, error) {
	ap, ok := t.Broker.(brokers.AsyncPublisher)
	if !ok {
		return nil, fmt.Errorf("brokerbench: %s does not implement brokers.AsyncPublisher", t.Broker.Name())
	}
	if o.Rate <= 0 {
		return nil, errors.New("brokerbench: PublishAtRate needs a positive rate")
	}
	total := lim.Messages
	if lim.Duration > 0 && (total <= 0 || float64(total) > o.Rate*lim.Duration.Seconds()) {
		total = int64(o.Rate * lim.Duration.Seconds())
	}
	if total <= 0 {
		return nil, errors.New("brokerbench: PublishAtRate needs a message count or a duration")
	}
	ms, err := o.messages(idPrefix)
	if err != nil {
		return nil, err
	}
	r := &rateRun{t: t, ap: ap, o: o, ms: ms, total: total, interval: float64(time.Second) / o.Rate,
		lags: make([]*hdrhistogram.Histogram, o.Publishers), confirm: newHist(), stop: make(chan struct{})}
	for g := range r.lags {
		r.lags[g] = newHist()
	}
	r.start = time.Now()
	return r, nil
}

func (r *rateRun) due(i int64) time.Time {
	return r.start.Add(time.Duration(float64(i) * r.interval))
}

// publisher g sends messages g, g+P, … at their due times, each call with
// what is due by then, until the last, a failure or ctx's end.
func (r *rateRun) publisher(ctx context.Context, g int) {
	defer r.pubs.Done()
	step := int64(r.o.Publishers)
	for i := int64(g); i < r.total; {
		if d := time.Until(r.due(i)); d > 0 {
			select {
			case <-time.After(d):
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			}
		}
		now := time.Now()
		batch := make([]brokers.Message, 0, 1)
		var dues []time.Time
		for j := i; j < r.total && len(batch) < r.o.Batch && !r.due(j).After(now); j += step {
			t := r.due(j)
			dues = append(dues, t)
			batch = append(batch, r.ms.At(j, strconv.FormatInt(t.UnixNano(), 10)))
		}
		i += step * int64(len(batch))
		r.send(ctx, batch, dues, r.lags[g])
	}
}

// send hands batch over in one call and records each message's lag from
// its due time in lag.
func (r *rateRun) send(ctx context.Context, batch []brokers.Message, dues []time.Time, lag *hdrhistogram.Histogram) {
	c := &rateCall{n: len(batch)}
	r.calls.Add(1)
	r.ncalls.Add(1)
	r.ap.PublishAsync(ctx, r.t.Name, batch, func(errs []error) { r.done(c, errs) })
	handed := time.Now()
	c.handed.Store(handed.UnixNano())
	r.recordConfirm(c)
	for _, t := range dues {
		_ = lag.RecordValue(max(1, handed.Sub(t).Microseconds()))
	}
}

// done counts a call's outcome; a failure stops the publishers.
func (r *rateRun) done(c *rateCall, errs []error) {
	at := time.Now()
	c.doneT.Store(at.UnixNano())
	r.recordConfirm(c)
	bad := 0
	for _, err := range errs {
		if err != nil {
			bad++
			r.errOnce.Do(func() { r.firstErr = err })
		}
	}
	r.confirmed.Add(int64(len(errs) - bad))
	if bad > 0 {
		r.failed.Add(int64(bad))
		r.stopOnce.Do(func() { close(r.stop) })
	}
	for {
		l := r.lastDone.Load()
		if l >= at.UnixNano() || r.lastDone.CompareAndSwap(l, at.UnixNano()) {
			break
		}
	}
	r.calls.Done()
}

// recordConfirm records c's confirm latency once both its hand-over and
// its done are known.
func (r *rateRun) recordConfirm(c *rateCall) {
	if c.second.Swap(true) {
		r.cmu.Lock()
		_ = r.confirm.RecordValues(max(1, (c.doneT.Load()-c.handed.Load())/1000), int64(c.n))
		r.cmu.Unlock()
	}
}

// result sums the run up once every call is done.
func (r *rateRun) result(ctx context.Context) (RateResult, error) {
	res := RateResult{Rate: r.o.Rate, Messages: r.confirmed.Load(), Failed: r.failed.Load(), Calls: r.ncalls.Load()}
	if l := r.lastDone.Load(); l > 0 {
		res.Elapsed = time.Unix(0, l).Sub(r.start)
	}
	merged := newHist()
	for _, h := range r.lags {
		merged.Merge(h)
	}
	res.Lag, res.Confirm = Summarize(merged), Summarize(r.confirm)
	name := r.t.Broker.Name()
	if r.firstErr != nil {
		return res, fmt.Errorf("%s: publish to %s at %.0f msgs/s: %d messages failed, first: %w", name, r.t.Name, r.o.Rate, res.Failed, r.firstErr)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("%s: publish to %s at %.0f msgs/s: %w", name, r.t.Name, r.o.Rate, err)
	}
	return res, nil
}
