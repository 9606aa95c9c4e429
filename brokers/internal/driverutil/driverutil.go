// Package driverutil holds the pieces every broker driver needs in the same
// shape: the subscription life cycle, batch handling with in-place retry
// and key hashing.
package driverutil

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// Lifecycle implements Done/Err of brokers.Subscription: the first Finish
// wins, later ones are ignored.
type Lifecycle struct {
	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// NewLifecycle returns a running Lifecycle.
func NewLifecycle() *Lifecycle { return &Lifecycle{done: make(chan struct{})} }

// Finish records err (nil for a clean end) and closes Done.
func (l *Lifecycle) Finish(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.done)
	})
}

// Done is closed by the first Finish.
func (l *Lifecycle) Done() <-chan struct{} { return l.done }

// Err is the error given to the first Finish.
func (l *Lifecycle) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Wait blocks until the first Finish and returns what a Subscription's
// Close reports: nil after a clean end or a deliberate crash (ErrCrashed is
// the caller's own doing), else the error that ended it.
func (l *Lifecycle) Wait() error {
	<-l.done
	if err := l.Err(); err != nil && !errors.Is(err, brokers.ErrCrashed) {
		return err
	}
	return nil
}

// CloseAll closes every subscription and joins their errors. Drivers copy
// their set under their lock (maps.Clone; an ending subscription removes
// itself from the original), mark themselves closed, and call it unlocked:
// a subscription's Close waits for running handlers.
func CloseAll[S interface {
	comparable
	Close() error
}](set map[S]struct{}) error {
	var errs []error
	for s := range set {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Settle acknowledges (Ack) or dead-letters (Reject) ds in order; vs[i] is
// ds[i]'s verdict, always Ack or Reject. Successive calls for one batch
// cover consecutive deliveries from its start (the first call a prefix,
// the next one the prefix of the rest, …), so a driver can keep its
// transport handles in a slice parallel to the batch. An error ends the
// subscription: nothing after it is settled.
type Settle func(ds []*brokers.Delivery, vs []brokers.Verdict) error

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

// HandleBatch calls h with ds (one shard's deliveries, in order) until
// every delivery is settled, obeying the verdicts as brokers.Handler
// documents: the Ack/Reject prefix before the first Retry is settled right
// away (so a retry backoff never delays acks), then, after
// opts.Backoff, the Handler gets the deliveries from that Retry onward
// again — held in place, not requeued, which is what keeps a shard's
// order. Any Crash settles nothing of that call. Deliveries, Acked,
// DeadLettered and Retried are counted in c; Attempt is set on each
// delivery before each call.
func HandleBatch(ctx context.Context, h brokers.Handler, ds []*brokers.Delivery, opts brokers.SubscribeOptions, c *brokers.Counters, settle Settle) (Outcome, error) {
	for _, d := range ds {
		d.Attempt = 0
	}
	for {
		if ctx.Err() != nil {
			return Unfinished, nil
		}
		for _, d := range ds {
			d.Attempt++
			c.Delivered()
		}
		vs := h(ctx, ds)
		if len(vs) != len(ds) {
			// Guessing which delivery a missing verdict belongs to could ack
			// something the caller never committed: settle nothing.
			return Failed, fmt.Errorf("handler returned %d verdicts for a batch of %d deliveries (first %s): it must return one per delivery", len(vs), len(ds), ds[0].TransportID)
		}
		cut := len(vs) // index of the first Retry
		for i, v := range vs {
			switch v {
			case brokers.Ack, brokers.Reject:
			case brokers.Retry:
				cut = min(cut, i)
			default: // Crash, or a verdict the driver does not know: ack nothing
				return Crashed, nil
			}
		}
		if cut > 0 {
			if err := settle(ds[:cut], vs[:cut]); err != nil {
				return Failed, err
			}
			for _, v := range vs[:cut] {
				if v == brokers.Ack {
					c.Acked()
				} else {
					c.DeadLettered()
				}
			}
		}
		if cut == len(ds) {
			return Settled, nil
		}
		c.Retried()
		ds = ds[cut:]
		t := time.NewTimer(opts.Backoff(ds[0].Attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return Unfinished, nil
		case <-t.C:
		}
	}
}

// Shard maps an ordering key onto one of n shards (FNV-1a, as RocketMQ's
// hash queue selector does), so equal keys always share a shard. The
// rabbitmq and none drivers both use it, so they spread a workload's keys
// over their shards identically.
func Shard(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// Bounded runs fn in a goroutine and waits at most d for it; it reports
// whether fn finished. Used where a client library's shutdown can block
// forever on a dead server: a test must end with an error, not hang.
func Bounded(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
