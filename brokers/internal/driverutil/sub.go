package driverutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// Sub is what every driver's subscription keeps the same way: the Handler
// and options it was started with, its counters, whether it crashed and
// how it ended. A driver's subscription embeds it, which gives it Done,
// Err, Stats and Close of brokers.Subscription, and starts it with Init.
type Sub struct {
	// Opts are the subscription's options, defaults applied.
	Opts brokers.SubscribeOptions

	h       brokers.Handler
	end     func(cause error) // the driver's shutdown
	stats   brokers.Counters
	crashed atomic.Bool
	// lastWarn is when Warn last logged, in Unix nanoseconds.
	lastWarn atomic.Int64

	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// Init starts s for a subscription calling h with opts; end is the
// driver's shutdown, which Close, Crash and Handle call and which calls
// Finish once the subscription's handlers and connections are done.
func (s *Sub) Init(opts brokers.SubscribeOptions, h brokers.Handler, end func(cause error)) {
	s.Opts, s.h, s.end = opts.WithDefaults(), h, end
	s.done = make(chan struct{})
}

// Finish records err (nil for a clean end) and closes Done: the first
// Finish wins, later ones are ignored.
func (s *Sub) Finish(err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	})
}

// Done implements brokers.Subscription: it is closed by the first Finish.
func (s *Sub) Done() <-chan struct{} { return s.done }

// Err implements brokers.Subscription: the error given to the first
// Finish.
func (s *Sub) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Stats implements brokers.Subscription.
func (s *Sub) Stats() brokers.Stats { return s.stats.Stats() }

// Received counts n deliveries the driver took from the broker (see
// brokers.Stats.Received).
func (s *Sub) Received(n int) { s.stats.Received(n) }

// Close implements brokers.Subscription: it ends the subscription (the
// driver's end, with no cause) and waits until it finished. It reports
// nil after a clean end or a deliberate crash (ErrCrashed is the caller's
// own doing), else the error that ended it.
func (s *Sub) Close() error {
	s.end(nil)
	<-s.done
	if err := s.Err(); err != nil && !errors.Is(err, brokers.ErrCrashed) {
		return err
	}
	return nil
}

// Crash ends the subscription with ErrCrashed, once: after it, Crashed
// reports true, so the driver settles nothing more.
func (s *Sub) Crash() {
	if s.crashed.CompareAndSwap(false, true) {
		s.stats.Crashed()
		s.end(brokers.ErrCrashed)
	}
}

// Crashed reports whether the subscription crashed (a Crash verdict).
func (s *Sub) Crashed() bool { return s.crashed.Load() }

// Settle acknowledges (Ack) or dead-letters (Reject) ds in order; vs[i] is
// ds[i]'s verdict, always Ack or Reject. Successive calls for one batch
// cover consecutive deliveries from its start (the first call a prefix,
// the next one the prefix of the rest, …), so a driver can keep its
// transport handles in a slice parallel to the batch. An error ends the
// subscription: nothing after it is settled.
type Settle func(ds []*brokers.Delivery, vs []brokers.Verdict) error

// InOrder is the Settle of a driver that acknowledges a queue's
// deliveries by position, as a committed offset does: it dead-letters the
// Rejects of a settled prefix one by one, in order (deadLetter(i), i the
// delivery's index in the batch), then acknowledges everything up to the
// prefix's last delivery at once (ack(i)). When a dead-letter copy fails,
// what precedes that delivery is acknowledged and the rest is left to be
// redelivered rather than skipped.
func InOrder(deadLetter func(i int) error, ack func(i int)) Settle {
	next := 0 // HandleBatch settles consecutive prefixes of the batch
	return func(ds []*brokers.Delivery, vs []brokers.Verdict) error {
		first := next
		next += len(ds)
		for k, v := range vs {
			if v != brokers.Reject {
				continue
			}
			if err := deadLetter(first + k); err != nil {
				if k > 0 {
					ack(first + k - 1)
				}
				return err
			}
		}
		ack(next - 1)
		return nil
	}
}

// Outcome is how HandleBatch ended.
type Outcome int

const (
	// Settled: every delivery of the batch was acked or dead-lettered.
	Settled Outcome = iota
	// Crashed: a Crash verdict (or one the driver does not know); nothing
	// of the last Handler call was settled. The driver crashes.
	Crashed
	// Unfinished: ctx ended before the batch was settled; the rest is left
	// unacknowledged for redelivery.
	Unfinished
	// Failed: the Handler broke its contract or settling failed; the error
	// says which, and the driver ends the subscription with it.
	Failed
)

// Handle is a queue worker's step, the same in every driver: it runs
// HandleBatch and carries out its outcome. It reports true when the
// batch is settled and the worker goes on; false when the worker is to
// stop: ctx ended (the rest is left for redelivery), the Handler crashed
// (the subscription crashes), or handling failed (fail gets the error,
// for the driver to end the subscription, or its session, with it).
func (s *Sub) Handle(ctx context.Context, ds []*brokers.Delivery, settle Settle, fail func(error)) bool {
	switch out, err := s.HandleBatch(ctx, ds, settle); out {
	case Settled:
		return true
	case Crashed:
		s.Crash()
	case Failed:
		fail(err)
	}
	return false
}

// HandleBatch calls the Handler with ds (one shard's deliveries, in order)
// until every delivery is settled, obeying the verdicts as
// brokers.Handler documents: the Ack/Reject prefix before the first Retry
// is settled right away (so a retry backoff never delays acks), then,
// after Opts.Backoff, the Handler gets the deliveries from that Retry
// onward again — held in place, not requeued, which is what keeps a
// shard's order. Any Crash settles nothing of that call. Deliveries,
// Acked, DeadLettered and Retried are counted in Stats; Attempt is set on
// each delivery before each call.
func (s *Sub) HandleBatch(ctx context.Context, ds []*brokers.Delivery, settle Settle) (Outcome, error) {
	for _, d := range ds {
		d.Attempt = 0
	}
	for {
		cut, out, err := s.HandleOnce(ctx, ds, settle)
		if out != Settled || cut == len(ds) {
			return out, err
		}
		ds = ds[cut:]
		t := time.NewTimer(s.Opts.Backoff(ds[0].Attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return Unfinished, nil
		case <-t.C:
		}
	}
}

// HandleOnce is one Handler call of HandleBatch, for a driver that does
// not retry in place (kafka-share hands a retried delivery back to the
// broker): unless ctx ended (Unfinished), it counts ds as delivered
// (Attempt+1 each), calls the Handler, and settles the Ack/Reject prefix
// before the first Retry, whose index it returns (len(ds) when there is
// none; Stats' Retried counts the call when there is one).
func (s *Sub) HandleOnce(ctx context.Context, ds []*brokers.Delivery, settle Settle) (int, Outcome, error) {
	if ctx.Err() != nil {
		return 0, Unfinished, nil
	}
	for _, d := range ds {
		d.Attempt++
		s.stats.Delivered()
	}
	cut, out, err := s.obey(ds, s.h(ctx, ds), settle)
	if out == Settled && cut < len(ds) {
		s.stats.Retried()
	}
	return cut, out, err
}

// obey settles what one Handler call's verdicts vs for ds allow: the
// prefix before the first Retry, whose index it returns (len(ds) when
// there is none), unless the call crashed or broke its contract.
func (s *Sub) obey(ds []*brokers.Delivery, vs []brokers.Verdict, settle Settle) (int, Outcome, error) {
	if len(vs) != len(ds) {
		// Guessing which delivery a missing verdict belongs to could ack
		// something the caller never committed: settle nothing.
		return 0, Failed, fmt.Errorf("handler returned %d verdicts for a batch of %d deliveries (first %s): it must return one per delivery", len(vs), len(ds), ds[0].TransportID)
	}
	cut := len(vs) // index of the first Retry
	for i, v := range vs {
		switch v {
		case brokers.Ack, brokers.Reject:
		case brokers.Retry:
			cut = min(cut, i)
		default: // Crash, or a verdict the driver does not know: ack nothing
			return 0, Crashed, nil
		}
	}
	if cut == 0 {
		return 0, Settled, nil
	}
	if err := settle(ds[:cut], vs[:cut]); err != nil {
		return 0, Failed, err
	}
	for _, v := range vs[:cut] {
		if v == brokers.Ack {
			s.stats.Acked()
		} else {
			s.stats.DeadLettered()
		}
	}
	return cut, Settled, nil
}

// WarnEvery is the least time between two warnings of a subscription.
const WarnEvery = 10 * time.Second

// Warn logs a failure the driver retries by itself, at most once per
// WarnEvery for the subscription: a restarting broker fails every call.
func (s *Sub) Warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := s.lastWarn.Load()
	if now-last < int64(WarnEvery) || !s.lastWarn.CompareAndSwap(last, now) {
		return
	}
	slog.Warn(msg, args...)
}
