// Package driverutil holds the pieces every broker driver needs in the same
// shape: the subscription life cycle, in-place retry and key hashing.
package driverutil

import (
	"context"
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

// Handle calls h for d until it returns something other than Retry, waiting
// opts.Backoff between attempts (the in-place retry that keeps a shard's
// order: the delivery is held, not requeued). It returns the final verdict
// and false when ctx ended first; the delivery is then unfinished and must
// be left for redelivery. Deliveries and Retried are counted in c.
func Handle(ctx context.Context, h brokers.Handler, d *brokers.Delivery, opts brokers.SubscribeOptions, c *brokers.Counters) (brokers.Verdict, bool) {
	for d.Attempt = 1; ; d.Attempt++ {
		if ctx.Err() != nil {
			return brokers.Retry, false
		}
		c.Delivered()
		v := h(ctx, d)
		if v != brokers.Retry {
			return v, true
		}
		c.Retried()
		t := time.NewTimer(opts.Backoff(d.Attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return brokers.Retry, false
		case <-t.C:
		}
	}
}

// Shard maps an ordering key onto one of n shards (FNV-1a, as RocketMQ's
// hash queue selector does), so equal keys always share a shard.
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
