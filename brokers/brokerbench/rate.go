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

// PublishAtRate publishes open loop at rate messages per second until
// lim: message i is due at start + i/rate and is handed to the driver's
// PublishAsync at its due time whatever is still unconfirmed, by one of
// o.Publishers goroutines (publisher g sends i = g, g+P, …), in calls of
// the messages already due (at most o.Batch: a call carries more than
// one only while its publisher is behind). SentHeader carries the due
// time, so a consumer's latency counts from when the message should have
// gone (no coordinated omission). The first failed message ends the
// publish with an error after every done came.
func PublishAtRate(ctx context.Context, br brokers.Broker, topic, idPrefix string, o Options, rate float64, lim Limit) (RateResult, error) {
	o = o.WithDefaults()
	res := RateResult{Rate: rate}
	ap, ok := br.(brokers.AsyncPublisher)
	if !ok {
		return res, fmt.Errorf("brokerbench: %s does not implement brokers.AsyncPublisher", br.Name())
	}
	if rate <= 0 {
		return res, errors.New("brokerbench: PublishAtRate needs a positive rate")
	}
	total := lim.Messages
	if lim.Duration > 0 && (total <= 0 || float64(total) > rate*lim.Duration.Seconds()) {
		total = int64(rate * lim.Duration.Seconds())
	}
	if total <= 0 {
		return res, errors.New("brokerbench: PublishAtRate needs a message count or a duration")
	}
	bodies, err := Bodies(o.Size, bodyPool)
	if err != nil {
		return res, err
	}
	var (
		calls             sync.WaitGroup
		confirmed, failed atomic.Int64
		ncalls            atomic.Int64
		cmu               sync.Mutex
		confirm           = newHist()
		lastDone          atomic.Int64
		errOnce           sync.Once
		firstErr          error
		pubs              sync.WaitGroup
		lags              = make([]*hdrhistogram.Histogram, o.Publishers)
		start             = time.Now()
		stop              = make(chan struct{})
		stopOnce          sync.Once
		interval          = float64(time.Second) / rate
		due               = func(i int64) time.Time { return start.Add(time.Duration(float64(i) * interval)) }
	)
	// call is one PublishAsync call: whichever of its return and its done
	// comes second records the confirm latency.
	type call struct {
		n             int
		handed, doneT atomic.Int64
		second        atomic.Bool
	}
	recordConfirm := func(c *call) {
		if c.second.Swap(true) {
			cmu.Lock()
			_ = confirm.RecordValues(max(1, (c.doneT.Load()-c.handed.Load())/1000), int64(c.n))
			cmu.Unlock()
		}
	}
	for g := range o.Publishers {
		lags[g] = newHist()
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			lag := lags[g]
			step := int64(o.Publishers)
			for i := int64(g); i < total; {
				if d := time.Until(due(i)); d > 0 {
					select {
					case <-time.After(d):
					case <-stop:
						return
					case <-ctx.Done():
						return
					}
				}
				now := time.Now()
				batch := make([]brokers.Message, 0, 1)
				var dues []time.Time
				for j := i; j < total && len(batch) < o.Batch && !due(j).After(now); j += step {
					t := due(j)
					dues = append(dues, t)
					batch = append(batch, Message(idPrefix, j, o.Keys, bodies[j%bodyPool], strconv.FormatInt(t.UnixNano(), 10)))
				}
				i += step * int64(len(batch))
				c := &call{n: len(batch)}
				calls.Add(1)
				ncalls.Add(1)
				ap.PublishAsync(ctx, topic, batch, func(errs []error) {
					at := time.Now()
					c.doneT.Store(at.UnixNano())
					recordConfirm(c)
					bad := 0
					for _, err := range errs {
						if err != nil {
							bad++
							errOnce.Do(func() { firstErr = err })
						}
					}
					confirmed.Add(int64(len(errs) - bad))
					if bad > 0 {
						failed.Add(int64(bad))
						stopOnce.Do(func() { close(stop) })
					}
					for {
						l := lastDone.Load()
						if l >= at.UnixNano() || lastDone.CompareAndSwap(l, at.UnixNano()) {
							break
						}
					}
					calls.Done()
				})
				handed := time.Now()
				c.handed.Store(handed.UnixNano())
				recordConfirm(c)
				for _, t := range dues {
					_ = lag.RecordValue(max(1, handed.Sub(t).Microseconds()))
				}
			}
		}()
	}
	pubs.Wait()
	calls.Wait() // every done comes: ctx's end fails what is unconfirmed
	res.Messages, res.Failed, res.Calls = confirmed.Load(), failed.Load(), ncalls.Load()
	if l := lastDone.Load(); l > 0 {
		res.Elapsed = time.Unix(0, l).Sub(start)
	}
	merged := newHist()
	for _, h := range lags {
		merged.Merge(h)
	}
	res.Lag, res.Confirm = Summarize(merged), Summarize(confirm)
	if firstErr != nil {
		return res, fmt.Errorf("%s: publish to %s at %.0f msgs/s: %d messages failed, first: %w", br.Name(), topic, rate, res.Failed, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("%s: publish to %s at %.0f msgs/s: %w", br.Name(), topic, rate, err)
	}
	return res, nil
}
