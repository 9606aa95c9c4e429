package driverutil

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// unsettled marks a message of a Pending call not settled yet.
var unsettled = errors.New("unsettled")

// Calls tracks a driver's open PublishAsync calls, so Close can fail
// what its transport left unconfirmed and return after every done.
type Calls struct {
	// Driver names the driver in the errors of its calls.
	Driver string

	mu     sync.Mutex
	open   map[*Pending]struct{}
	closed error // set by Close
	idle   chan struct{}
}

// Pending is one PublishAsync call: each message is settled once, and
// done runs after the last one, or when the call's ctx ends, or when
// Calls.Close gives up waiting; settles after that are ignored. A driver
// goroutine settles with Settle (done then runs on it, before Settle
// returns, so a window slot freed after Settle is freed after done); the
// goroutine that called PublishAsync settles with SettleInCall, which never runs
// done itself.
type Pending struct {
	calls  *Calls
	driver string
	topic  string
	msgs   []brokers.Message
	done   func([]error)
	stop   func() bool // the ctx watch

	mu   sync.Mutex
	errs []error // nil once finished
	left int     // unsettled messages
}

// Start registers a call of msgs to topic. When Calls is closed it fails
// every message at once (done on another goroutine) and returns nil: the
// caller hands nothing over.
func (c *Calls) Start(ctx context.Context, topic string, msgs []brokers.Message, done func([]error)) *Pending {
	c.mu.Lock()
	if c.closed != nil {
		err := c.closed
		c.mu.Unlock()
		FailAsync(len(msgs), fmt.Errorf("%s: publish to %s: %w", c.Driver, topic, err), done)
		return nil
	}
	if len(msgs) == 0 {
		c.mu.Unlock()
		go done([]error{})
		return nil
	}
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = unsettled
	}
	p := &Pending{calls: c, driver: c.Driver, topic: topic, msgs: msgs, done: done, errs: errs, left: len(msgs)}
	if c.open == nil {
		c.open = map[*Pending]struct{}{}
	}
	c.open[p] = struct{}{}
	c.mu.Unlock()
	p.mu.Lock() // an abort from the watch waits for stop to be set
	p.stop = context.AfterFunc(ctx, func() { p.abort(fmt.Errorf("not confirmed: %w", ctx.Err())) })
	p.mu.Unlock()
	return p
}

// Queue is a driver's publisher of one shard queue, for Spread.
type Queue interface {
	// Send hands m, message i of p, to the queue, blocking while its
	// window is full; it reports false when ctx ended first (p failed the
	// message then) and nothing more is to be handed over.
	Send(ctx context.Context, p *Pending, i int, m *brokers.Message) bool
}

// Spread is the PublishAsync of a driver with a publisher per shard queue,
// once Start registered the call as p (nil: nothing to do): unless ctx
// ended, it gets the topic's queues from queues (their error fails every
// message) and hands each message, in slice order, to the queue its key
// hashes onto (Shard), so one key's messages keep slice and call order.
// It stops handing over when ctx ends: the call fails the rest.
func Spread[Q Queue](ctx context.Context, p *Pending, queues func() ([]Q, error)) {
	if p == nil || ctx.Err() != nil {
		return // the call fails every message with ctx's error
	}
	qs, err := queues()
	if err != nil {
		p.SettleAllInCall(err)
		return
	}
	for i := range p.msgs {
		m := &p.msgs[i]
		if ctx.Err() != nil || !qs[Shard(m.Key, len(qs))].Send(ctx, p, i, m) {
			return
		}
	}
}

// FailAsync calls done with n copies of err on a goroutine of its own.
func FailAsync(n int, err error, done func([]error)) {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	go done(errs)
}

// Settle records msgs[i]'s outcome (nil: confirmed) from a driver
// goroutine; when it was the last, done runs before Settle returns. A
// second settle of i, or one after the call finished, is ignored.
func (p *Pending) Settle(i int, err error) { p.settle(i, err, false) }

// SettleInCall is Settle for the goroutine that called PublishAsync: when it was
// the last, done runs on a goroutine of its own.
func (p *Pending) SettleInCall(i int, err error) { p.settle(i, err, true) }

// SettleAllInCall is SettleInCall of every message of the call with err.
func (p *Pending) SettleAllInCall(err error) {
	for i := range p.msgs {
		p.SettleInCall(i, err)
	}
}

func (p *Pending) settle(i int, err error, async bool) {
	p.mu.Lock()
	if p.errs == nil || p.errs[i] != unsettled {
		p.mu.Unlock()
		return
	}
	p.errs[i] = err
	p.left--
	p.finishLocked(async)
}

// Done reports whether the call has finished (ctx ended, or everything
// settled): a driver stops handing over its messages then.
func (p *Pending) Done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs == nil
}

// abort fails every unsettled message with cause and finishes the call.
func (p *Pending) abort(cause error) {
	p.mu.Lock()
	if p.errs == nil {
		p.mu.Unlock()
		return
	}
	for i, e := range p.errs {
		if e == unsettled {
			p.errs[i] = fmt.Errorf("%s: publish %s to %s: %w", p.driver, p.msgs[i].ID, p.topic, cause)
		}
	}
	p.left = 0
	p.finishLocked(false)
}

// finishLocked ends the call when nothing is left; p.mu is held and is
// released.
func (p *Pending) finishLocked(async bool) {
	if p.left > 0 {
		p.mu.Unlock()
		return
	}
	errs, stop := p.errs, p.stop
	p.errs = nil
	p.mu.Unlock()
	stop()
	if async {
		go p.finish(errs)
	} else {
		p.finish(errs)
	}
}

// finish calls done, then forgets the call.
func (p *Pending) finish(errs []error) {
	p.done(errs)
	c := p.calls
	c.mu.Lock()
	delete(c.open, p)
	if len(c.open) == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
	c.mu.Unlock()
}

// Close refuses new calls with err, waits up to wait for the open ones
// (the driver closed or is closing their transport, which fails what it
// holds), then fails what is left with err. It returns once every done
// returned, or after another wait when a done does not return.
func (c *Calls) Close(err error, wait time.Duration) {
	c.mu.Lock()
	if c.closed == nil {
		c.closed = err
	}
	idle := c.idleLocked()
	c.mu.Unlock()
	select {
	case <-idle:
		return
	case <-time.After(wait):
	}
	c.mu.Lock()
	open := make([]*Pending, 0, len(c.open))
	for p := range c.open {
		open = append(open, p)
	}
	idle = c.idleLocked()
	c.mu.Unlock()
	for _, p := range open {
		go p.abort(err)
	}
	select {
	case <-idle:
	case <-time.After(wait):
	}
}

// idleLocked returns a channel closed once no call is open.
func (c *Calls) idleLocked() <-chan struct{} {
	if len(c.open) == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	return c.idle
}
