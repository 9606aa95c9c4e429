package runner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/external"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// Effects beyond the database. A cell whose strategy calls the external
// service (inbox.CallsExternal) works in a namespace of its own of the
// run's service: the one this process started on loopback, or the one at
// Options.External.URL (`bench external serve`). Its strategy calls the
// service through an extCaller, which injects the workload's external
// faults and measures the calls; the cell starts the outbox relay when
// the strategy has one, makes the service unavailable for a while when
// the fault plan says so, and after the stream reads the service's call
// log for the checker (Judge's external rules) and the cell's External
// figures.

// KeyExternalURL names Options.External.URL.
const KeyExternalURL = "runner.external.url"

// ExternalService is where the run's external service is.
type ExternalService struct {
	// URL is a service started with `bench external serve`; empty, the
	// run starts one in its own process on a loopback port when a
	// strategy needs it (the worker processes of this machine reach it
	// there, workers on other machines do not).
	URL string
}

// errDiedAfterCall is the crash fault between an external call and its
// commit, in a process that does not really die (in-process consumers,
// the coordinator's relay): the strategy returns it, and the handler then
// answers like a dead consumer (brokers.Crash).
var errDiedAfterCall = errors.New("crash fault: the handler died between the external call and its commit")

// startExternal starts the run's external service in this process when a
// cell needs one and no URL was given, or checks the one given; the
// returned stop ends it.
func startExternal(ctx context.Context, o *Options) (stop func(), err error) {
	need := false
	for _, n := range cellStrategies(*o) {
		if st, err := lookupStrategy(*o, n); err == nil && inbox.CallsExternal(st) {
			need = true
		}
	}
	switch {
	case !need:
		return func() {}, nil
	case o.External.URL != "":
		if err := external.Ping(ctx, o.External.URL); err != nil {
			return nil, &config.SettingError{Key: KeyExternalURL, Value: o.External.URL, Err: err}
		}
		return func() {}, nil
	}
	srv, err := external.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o.External.URL = srv.URL
	return func() { _ = srv.Close() }, nil
}

// extCaller is a cell's side of the external service in one process: the
// strategy's external.API (the service's client, asking for the fault
// plan's timeouts, measured) and the crash between a call and its commit.
type extCaller struct {
	client *external.Client
	spec   *workload.Spec
	t      *tally
	// hooks decide a crash fault once per event and cell, and kill a
	// worker process; set once the cell's handler exists.
	mu    sync.Mutex
	hooks hooks
}

func newExtCaller(url, ns string, spec *workload.Spec, t *tally) *extCaller {
	c := &extCaller{client: external.NewClient(url, ns, spec.ExternalTimeoutOrDefault()), spec: spec, t: t, hooks: &inProcess{}}
	c.client.Fault = func(r external.Request) string {
		if spec.ExternalTimeoutFault(r.Reference) {
			return external.FaultTimeout
		}
		return ""
	}
	return c
}

func (c *extCaller) setHooks(h hooks) {
	c.mu.Lock()
	c.hooks = h
	c.mu.Unlock()
}

func (c *extCaller) getHooks() hooks {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hooks
}

// Pay implements external.API.
func (c *extCaller) Pay(ctx context.Context, r external.Request) (external.Payment, error) {
	start := time.Now()
	p, err := c.client.Pay(ctx, r)
	if err == nil {
		c.t.meters.recordExternal(time.Since(start), r.IntendedAt, c.t.warmEnd.Load())
	}
	return p, err
}

// Lookup implements external.API.
func (c *extCaller) Lookup(ctx context.Context, key string) (external.Payment, bool, error) {
	return c.client.Lookup(ctx, key)
}

// afterCall is inbox.Options.AfterCall: the crash fault between an
// event's external call and its commit, once per event and cell.
func (c *extCaller) afterCall(ctx context.Context, _ string, ev *envelope.Event) error {
	if !c.spec.CrashAfterCall(ev.Key()) {
		return nil
	}
	h := c.getHooks()
	if !h.firstCrash(ctx, "call "+ev.Key()) {
		return nil
	}
	if relaying(ctx) {
		// The relay has no subscription whose end counts the crash.
		c.t.c.crashes.Add(1)
	}
	h.crash(ctx) // a worker process: a real kill -9, no return
	return errDiedAfterCall
}

// options wires the caller into an inbox's options.
func (c *extCaller) options(o *inbox.Options) {
	o.External, o.AfterCall, o.Lease = c, c.afterCall, c.spec.ExternalLeaseOrDefault()
}

type relayKey struct{}

// relaying marks the context of the outbox relay.
func relaying(ctx context.Context) bool { return ctx.Value(relayKey{}) != nil }

// cellExternal is what a cell does with the external service.
type cellExternal struct {
	caller *extCaller
	relay  inbox.Relaying // the strategy's relay, or nil
	stop   context.CancelFunc
	done   chan struct{}
}

// setUpExternal configures the cell's namespace for a strategy that calls
// the service; nil for one that does not.
func (c *cell) setUpExternal(ctx context.Context) (*cellExternal, error) {
	if !inbox.CallsExternal(c.strategy) {
		return nil, nil
	}
	if c.o.External.URL == "" {
		return nil, fmt.Errorf("%s calls an external service and the run has none (%s)", c.strategy.Name(), KeyExternalURL)
	}
	x := &cellExternal{caller: newExtCaller(c.o.External.URL, c.id, c.o.Spec, c.t)}
	x.relay, _ = c.strategy.(inbox.Relaying)
	if err := x.caller.client.Configure(ctx, external.Config{Delay: c.o.Spec.External.Delay.D()}); err != nil {
		return nil, err
	}
	return x, nil
}

// inboxOptions gives the cell's inbox the caller (nothing without one).
func (x *cellExternal) inboxOptions(o *inbox.Options) {
	if x != nil {
		x.caller.options(o)
	}
}

// setHooks hands the caller the hooks of the cell's handler in this
// process.
func (x *cellExternal) setHooks(h hooks) {
	if x != nil {
		x.caller.setHooks(h)
	}
}

// actions are the cell's mid-stream faults: the run's, and the external
// service's outage.
func (c *cell) actions() ([]Action, error) {
	acts := append(append([]Action(nil), c.o.Stream.Actions...), c.instanceKills()...)
	if a := c.ext.unavailable(c.o.Spec); a != nil {
		acts = append(acts, *a)
	}
	fo, err := c.failoverActions()
	if err != nil {
		return nil, err
	}
	acts = append(acts, fo...)
	// They fire in this order (actions.fireDue): by their share.
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].At < acts[j].At })
	return acts, nil
}

// startRelay runs the strategy's outbox relay beside the consumers, in
// this process.
func (x *cellExternal) startRelay(ctx context.Context, in *inbox.Inbox, workers int) {
	if x == nil || x.relay == nil {
		return
	}
	rctx, stop := context.WithCancel(context.WithValue(ctx, relayKey{}, true))
	x.stop, x.done = stop, make(chan struct{})
	go func() {
		defer close(x.done)
		x.relay.RunRelay(rctx, in, workers)
	}()
}

// flush stops the relay and sends what is still pending, so that the
// checker judges every request the cell committed.
func (x *cellExternal) flush(ctx context.Context, in *inbox.Inbox) error {
	if x == nil || x.relay == nil {
		return nil
	}
	x.stopRelay()
	fctx, cancel := context.WithTimeout(context.WithValue(ctx, relayKey{}, true), 2*time.Minute)
	defer cancel()
	if err := x.relay.FlushRelay(fctx, in); err != nil {
		return fmt.Errorf("outbox relay: %w", err)
	}
	return nil
}

// stopRelay stops the relay started beside the consumers, if it runs.
func (x *cellExternal) stopRelay() {
	if x != nil && x.stop != nil {
		x.stop()
		<-x.done
		x.stop = nil
	}
}

// unavailable is the fault plan's outage of the service, as a mid-stream
// action; nil without one.
func (x *cellExternal) unavailable(spec *workload.Spec) *Action {
	d := spec.Faults.ExternalUnavailable.D()
	if x == nil || d <= 0 {
		return nil
	}
	return &Action{Name: fmt.Sprintf("the external service refuses every call for %s", d), At: 1.0 / 3,
		Do: func(ctx context.Context, _ CellInfo) error { return x.caller.client.SetUnavailable(ctx, d) }}
}

// log reads the cell's call log, then forgets the namespace.
func (x *cellExternal) log(ctx context.Context) (*external.Log, error) {
	l, err := x.caller.client.Log(ctx)
	if err != nil {
		return nil, err
	}
	_ = x.caller.client.Drop(ctx)
	x.caller.client.Close()
	return l, nil
}

// externalFigures are a cell's External figures: the service's settings
// and its log, counted by outcome.
func externalFigures(spec *workload.Spec, l *external.Log) *results.External {
	t := l.Tally()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return &results.External{DelayMs: ms(spec.External.Delay.D()), TimeoutMs: ms(spec.ExternalTimeoutOrDefault()),
		Calls: t.Calls, Effects: t.Effects, Replays: t.Replays, Conflicts: t.Conflicts, Refused: t.Refused, TimedOut: t.TimedOut, Queries: t.Queries}
}
