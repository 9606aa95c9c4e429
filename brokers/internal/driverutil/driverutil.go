// Package driverutil holds the pieces every broker driver needs in the same
// shape: the subscription's state and batch handling with in-place retry
// (Sub), the driver's set of subscriptions (Subs), the bookkeeping of
// PublishAsync calls (Calls), key hashing, the start of Explain and the
// TLS settings.
package driverutil

import (
	"errors"
	"hash/fnv"
	"maps"
	"sync"
	"time"
)

// Subs is a driver's set of running subscriptions and whether the driver
// is closed. It is kept under the driver's own lock (NewSubs), which may
// guard more of the driver's state: a driver that must not start
// something after Close checks Closed while holding that lock.
type Subs[S interface {
	comparable
	Close() error
}] struct {
	mu     *sync.Mutex
	closed bool
	set    map[S]struct{}
}

// NewSubs returns an empty set kept under mu, the driver's lock.
func NewSubs[S interface {
	comparable
	Close() error
}](mu *sync.Mutex) *Subs[S] {
	return &Subs[S]{mu: mu, set: map[S]struct{}{}}
}

// Add registers a started subscription; it reports false, registering
// nothing, when the driver is closed (the caller undoes its start).
func (x *Subs[S]) Add(s S) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.set[s] = struct{}{}
	return true
}

// Remove forgets an ended subscription.
func (x *Subs[S]) Remove(s S) {
	x.mu.Lock()
	delete(x.set, s)
	x.mu.Unlock()
}

// Closed reports whether Close was called; the caller holds the driver's
// lock.
func (x *Subs[S]) Closed() bool { return x.closed }

// Close begins a driver's Close: under the driver's lock it marks the
// driver closed and runs locked (nil: nothing), where the driver takes
// whatever else it must release in the same step; then, unlocked (a
// subscription's Close waits for running handlers), it closes every
// subscription and joins their errors. first is false, and nothing is
// done, when the driver was closed already.
func (x *Subs[S]) Close(locked func()) (first bool, err error) {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return false, nil
	}
	x.closed = true
	set := maps.Clone(x.set) // an ending subscription removes itself
	if locked != nil {
		locked()
	}
	x.mu.Unlock()
	var errs []error
	for s := range set {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return true, errors.Join(errs...)
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

// CachedShards is a driver's shard count of topic: counts[topic], kept
// under mu, the driver's lock, once Setup (or an earlier call) put it
// there; else what lookup finds at the broker (a topic another process
// set up), which it keeps.
func CachedShards(mu *sync.Mutex, counts map[string]int, topic string, lookup func() (int, error)) (int, error) {
	mu.Lock()
	n, ok := counts[topic]
	mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := lookup()
	if err != nil {
		return 0, err
	}
	mu.Lock()
	counts[topic] = n
	mu.Unlock()
	return n, nil
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
