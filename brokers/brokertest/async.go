package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// Option gives the suite what some tests need beyond a plain broker.
type Option func(*options)

type options struct {
	window func(tb testing.TB, n int) brokers.Broker
}

// WithWindow gives the suite a factory of brokers whose publish window is
// n messages (the driver's option "publish-window"), for AsyncWindow.
// Without it that test is skipped (the none driver has no window).
func WithWindow(f func(tb testing.TB, n int) brokers.Broker) Option {
	return func(o *options) { o.window = f }
}

// asyncPublisher returns b's AsyncPublisher or skips the test.
func asyncPublisher(t *testing.T, b brokers.Broker) brokers.AsyncPublisher {
	t.Helper()
	ap, ok := b.(brokers.AsyncPublisher)
	if !ok {
		t.Skipf("%s does not implement brokers.AsyncPublisher", b.Name())
	}
	return ap
}

// asyncCalls issues PublishAsync calls of one publisher and checks every
// done: exactly once per call, len(errs) == len(msgs).
type asyncCalls struct {
	broker  string
	ap      brokers.AsyncPublisher
	wg      sync.WaitGroup
	mu      sync.Mutex
	results map[int][]error
	bad     []string
	issued  atomic.Int64 // calls issued
	dones   atomic.Int64 // done calls
}

func newAsyncCalls(broker string, ap brokers.AsyncPublisher) *asyncCalls {
	return &asyncCalls{broker: broker, ap: ap, results: map[int][]error{}}
}

// publish issues call id of msgs; it returns once PublishAsync did.
func (a *asyncCalls) publish(ctx context.Context, topic string, id int, msgs []brokers.Message) {
	a.wg.Add(1)
	a.issued.Add(1)
	var calls atomic.Int32
	a.ap.PublishAsync(ctx, topic, msgs, func(errs []error) {
		if calls.Add(1) > 1 {
			a.mu.Lock()
			a.bad = append(a.bad, fmt.Sprintf("done of call %d called again", id))
			a.mu.Unlock()
			return
		}
		a.mu.Lock()
		if len(errs) != len(msgs) {
			a.bad = append(a.bad, fmt.Sprintf("call %d: done got %d errors for %d messages", id, len(errs), len(msgs)))
		}
		a.results[id] = errs
		a.mu.Unlock()
		a.dones.Add(1)
		a.wg.Done()
	})
}

// wait waits for every done, failing the test after timeout or on a bad
// done.
func (a *asyncCalls) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	all := make(chan struct{})
	go func() { a.wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(timeout):
		t.Fatalf("%s: %d of %d PublishAsync calls got no done within %v", a.broker, a.issued.Load()-a.dones.Load(), a.issued.Load(), timeout)
	}
	time.Sleep(50 * time.Millisecond) // a second done, if any, comes now
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.bad) > 0 {
		t.Fatalf("%s: %s", a.broker, list(a.bad))
	}
}

// errs returns call id's errors.
func (a *asyncCalls) errs(id int) []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.results[id]
}

// Several goroutines each keep many PublishAsync calls in flight, each
// goroutine owning its keys: every call's done comes exactly once with
// nil errors, and the consumer sees every message, per key in order.
func testAsyncManyInFlight(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	ap := asyncPublisher(t, b)
	topic := Topic(t, b, 4)
	const goroutines, keys, perKey = 8, 16, 60
	msgs := Events(t, UniqueName(t, "e"), keys, perKey, 0)
	c := NewCollector(b.Name(), msgs)
	subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{MaxBatch: 16}, brokers.PerDelivery(c.Handle))
	a := newAsyncCalls(b.Name(), ap)
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	var wg sync.WaitGroup
	ids := make([][]int, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var own []brokers.Message // in Events order: each key's versions ascending
			for i, m := range msgs {
				if i%keys%goroutines == g {
					own = append(own, m)
				}
			}
			for i, n := 0, 1; i < len(own); i, n = i+n, n%7+1 {
				id := g*10000 + i
				ids[g] = append(ids[g], id)
				a.publish(ctx, topic, id, own[i:min(i+n, len(own))])
			}
		}()
	}
	wg.Wait()
	a.wait(t, publishTimeout)
	for _, gi := range ids {
		for _, id := range gi {
			if err := brokers.FirstError(a.errs(id)); err != nil {
				t.Fatalf("%s: call %d: %v", b.Name(), id, err)
			}
		}
	}
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)
}

// Calls to a topic that does not exist fail, all their messages, while
// the calls to a good topic interleaved with them are all confirmed.
func testAsyncFailureIsolated(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	ap := asyncPublisher(t, b)
	good := Topic(t, b, 2)
	missing := UniqueName(t, "missing")
	msgs := Events(t, UniqueName(t, "e"), 4, 10, 0)
	c := NewCollector(b.Name(), msgs)
	a := newAsyncCalls(b.Name(), ap)
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	for i := 0; i < len(msgs); i += 4 {
		a.publish(ctx, good, i, msgs[i:i+4])
		a.publish(ctx, missing, -1-i, Events(t, UniqueName(t, "m"), 2, 2, 0))
	}
	a.wait(t, publishTimeout)
	for i := 0; i < len(msgs); i += 4 {
		if err := brokers.FirstError(a.errs(i)); err != nil {
			t.Errorf("%s: a call to the good topic failed: %v", b.Name(), err)
		}
		for k, err := range a.errs(-1 - i) {
			if err == nil {
				t.Errorf("%s: message %d of a call to the missing topic %s was confirmed", b.Name(), k, missing)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("%s: a message to the missing topic: %v", b.Name(), a.errs(-1)[0])
	subscribe(t, b, good, UniqueName(t, "g"), brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)
}

// doneElsewhere publishes, without tracking the call, with a done that
// waits until PublishAsync has returned: a done called on the caller's
// goroutine (which the contract forbids) would wait for ever, so it gives
// up after a while and says so.
func (a *asyncCalls) doneElsewhere(ctx context.Context, t *testing.T, topic string, msgs []brokers.Message) []error {
	t.Helper()
	returned := make(chan struct{})
	got := make(chan []error, 2)
	var onCaller atomic.Bool
	a.ap.PublishAsync(ctx, topic, msgs, func(errs []error) {
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			onCaller.Store(true)
		}
		got <- errs
	})
	close(returned)
	var errs []error
	select {
	case errs = <-got:
	case <-time.After(publishTimeout):
		t.Fatalf("no done within %v", publishTimeout)
	}
	if onCaller.Load() {
		t.Errorf("done was called on the goroutine that called PublishAsync")
	}
	if len(errs) != len(msgs) {
		t.Fatalf("done got %d errors for %d messages", len(errs), len(msgs))
	}
	select {
	case <-got:
		t.Errorf("done was called twice")
	case <-time.After(50 * time.Millisecond):
	}
	return errs
}

// A cancelled ctx fails every message of a call not confirmed yet, and
// still calls done; with calls in flight when ctx ends, every done comes.
func testAsyncCancel(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	ap := asyncPublisher(t, b)
	topic := Topic(t, b, 2)
	msgs := Events(t, UniqueName(t, "e"), 4, 50, 0)
	a := newAsyncCalls(b.Name(), ap)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range a.doneElsewhere(ctx, t, topic, msgs[:10]) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: message %d of a call with a cancelled ctx: %v, want an error wrapping context.Canceled", b.Name(), i, err)
		}
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < len(msgs); i += 10 {
		a.publish(ctx, topic, i, msgs[i:i+10])
		if i == 100 {
			cancel()
		}
	}
	a.wait(t, publishTimeout)
	failed := 0
	for i := 0; i < len(msgs); i += 10 {
		for _, err := range a.errs(i) {
			if err != nil {
				failed++
				if !errors.Is(err, context.Canceled) {
					t.Logf("%s: failed after the cancel: %v", b.Name(), err)
				}
			}
		}
	}
	t.Logf("%s: %d of %d messages not confirmed when ctx was cancelled midway", b.Name(), failed, len(msgs))
	if failed < len(msgs)-110 {
		t.Errorf("%s: only %d messages failed, but %d were handed to PublishAsync after the cancel", b.Name(), failed, len(msgs)-110)
	}
}

// Close fails what is unconfirmed and returns after every done; after it
// PublishAsync fails every message (on another goroutine).
func testAsyncClose(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	topic := Topic(t, b, 2)
	other := newBroker(t)
	ap := asyncPublisher(t, other)
	msgs := Events(t, UniqueName(t, "e"), 4, 50, 0)
	a := newAsyncCalls(b.Name(), ap)
	for i := 0; i < len(msgs); i += 20 {
		a.publish(context.Background(), topic, i, msgs[i:i+20])
	}
	closed := make(chan error, 1)
	go func() { closed <- other.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Close took more than 30s with calls in flight", b.Name())
	}
	if n, d := a.issued.Load(), a.dones.Load(); d != n {
		t.Errorf("%s: Close returned with %d of %d dones still to come", b.Name(), n-d, n)
	}
	a.wait(t, publishTimeout)
	for i, err := range a.doneElsewhere(context.Background(), t, topic, msgs[:5]) {
		if err == nil {
			t.Errorf("%s: message %d published after Close was confirmed", b.Name(), i)
		}
	}
}

// With a window of 4, PublishAsync blocks: however fast one goroutine
// hands single messages over, handed-over minus done never exceeds the
// window (on a topic of one shard, so a per-queue window is the whole
// one) and reaches it; what went is delivered in order.
func testAsyncWindow(t *testing.T, newBroker NewBroker, o options) {
	if o.window == nil {
		t.Skip("no WithWindow factory: the driver has no publish window")
	}
	const window = 4
	b := o.window(t, window)
	ap := asyncPublisher(t, b)
	topic := Topic(t, b, 1)
	msgs := Events(t, UniqueName(t, "e"), 3, 100, 0)
	c := NewCollector(b.Name(), msgs)
	a := newAsyncCalls(b.Name(), ap)
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	most := int64(0)
	for i := range msgs {
		a.publish(ctx, topic, i, msgs[i:i+1])
		most = max(most, a.issued.Load()-a.dones.Load())
	}
	a.wait(t, publishTimeout)
	for i := range msgs {
		if err := brokers.FirstError(a.errs(i)); err != nil {
			t.Fatalf("%s: %v", b.Name(), err)
		}
	}
	t.Logf("%s: at most %d messages handed over and unconfirmed, window %d", b.Name(), most, window)
	if most > window {
		t.Errorf("%s: %d messages were handed over and unconfirmed at once, the window is %d", b.Name(), most, window)
	}
	if most < window {
		t.Errorf("%s: never more than %d messages unconfirmed while one goroutine published %d as fast as it could: does the window of %d block at all?", b.Name(), most, len(msgs), window)
	}
	subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{MaxBatch: 10}, brokers.PerDelivery(c.Handle))
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)
}
