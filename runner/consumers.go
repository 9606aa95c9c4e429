package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

// consumers are the consumers of one cell. A cell chooses once how they
// run — goroutines of this process (localConsumers) or `bench worker`
// processes (fleetConsumers, fleetconsumers.go) — and nothing downstream asks
// which.
type consumers interface {
	// start begins consuming and returns once the consumers are ready
	// for the stream (for workers: once enough of them joined).
	start(ctx context.Context) error
	// warm tells the consumers when the warm-up ends.
	warm(ctx context.Context, at time.Time)
	// restart performs planned consumer restart k (0-based): one consumer
	// leaves the group and joins again.
	restart(k int)
	// failed delivers an error that ends the cell.
	failed() <-chan error
	// lost counts consumers that vanished without a final report: what
	// they answered last cannot be counted.
	lost() int64
	// stop ends consumption and brings the final counts and histograms
	// into the cell's tally.
	stop(ctx context.Context) error
}

// localConsumers are n goroutines of this process, each one subscription
// with the cell's handler. `bench worker` runs them too, for its share.
type localConsumers struct {
	b      brokers.Broker
	topic  string
	group  string
	n      int
	h      *handler
	notes  *notes
	errs   chan error
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// restarts[i] asks consumer i to leave and subscribe again.
	restarts []chan struct{}
}

// newLocalConsumers are n consumers of the cell's topic and group with
// handler h.
func newLocalConsumers(c *cell, n int, h *handler) *localConsumers {
	l := &localConsumers{b: c.b, topic: c.topic(), group: c.group(), n: n, h: h, notes: c.notes, errs: make(chan error, n)}
	for range n {
		l.restarts = append(l.restarts, make(chan struct{}, 1))
	}
	return l
}

func (l *localConsumers) start(ctx context.Context) error {
	ctx, l.cancel = context.WithCancel(ctx)
	for i := range l.n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if err := l.consume(ctx, i); err != nil {
				l.errs <- err
			}
		}()
	}
	return nil
}

func (*localConsumers) warm(context.Context, time.Time) {} // they share the cell's tally
func (l *localConsumers) failed() <-chan error          { return l.errs }
func (*localConsumers) lost() int64                     { return 0 }

func (l *localConsumers) restart(k int) {
	select {
	case l.restarts[k%l.n] <- struct{}{}:
	default: // one is pending already
	}
}

func (l *localConsumers) stop(context.Context) error {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
	return nil
}

// consume runs consumer idx: it subscribes, and subscribes again after a
// crash fault, a lost connection or a planned restart, until ctx ends.
func (l *localConsumers) consume(ctx context.Context, idx int) error {
	opts := l.h.subscribeOptions()
	for first := true; ctx.Err() == nil; first = false {
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		v := newSubView(opts)
		sub, err := l.b.Subscribe(sctx, l.topic, l.group, opts, l.h.within(v))
		cancel()
		if err == nil {
			v.sub.Store(sub)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && first:
			return fmt.Errorf("%s: consumer %d: subscribe: %w", l.b.Name(), idx, err)
		case err != nil:
			// The broker may be restarting: keep trying, as a production
			// consumer would; the stall timeout ends a broker that never
			// comes back, and the error is in the cell's notes.
			l.notes.add(fmt.Sprintf("consumer %d: subscribe again: %v", idx, err))
			if !ctxtime.Sleep(ctx, time.Second) {
				return nil
			}
			continue
		}
		if !l.await(ctx, idx, sub) {
			return nil
		}
	}
	return nil
}

// await waits for sub to end or be restarted; false means ctx ended.
func (l *localConsumers) await(ctx context.Context, idx int, sub brokers.Subscription) bool {
	select {
	case <-ctx.Done():
		sub.Close()
		return false
	case <-l.restarts[idx]:
		sub.Close()
		return true
	case <-sub.Done():
	}
	if errors.Is(sub.Err(), brokers.ErrCrashed) {
		l.h.t.c.crashes.Add(1)
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	// Connection lost (a broker restart, a network fault): unacked
	// deliveries come back; subscribe again.
	l.notes.add(fmt.Sprintf("consumer %d: subscription ended: %v; subscribing again", idx, sub.Err()))
	return ctxtime.Sleep(ctx, 500*time.Millisecond)
}

// subView is what a handler call knows of the subscription it runs in:
// the options it was started with, its Stats once Subscribe returned, and
// whether its consumer is dying (handler.dieWithBacklog): died is closed
// once it died, or lived on (dying is then false again).
type subView struct {
	opts    brokers.SubscribeOptions
	sub     atomic.Value // brokers.Subscription
	mu      sync.Mutex   // one claim at a time
	claimed bool         // under mu: a subscription claims one death at most
	dying   atomic.Bool
	died    chan struct{}
}

func newSubView(opts brokers.SubscribeOptions) *subView {
	return &subView{opts: opts, died: make(chan struct{})}
}

// claim makes the calling handler call the one its consumer dies in,
// when no other call did and try claims one of the cell's crashes.
func (v *subView) claim(try func() bool) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.claimed || !try() {
		return false
	}
	v.claimed = true
	v.dying.Store(true)
	return true
}

func (v *subView) stats() brokers.Stats {
	if s, ok := v.sub.Load().(brokers.Subscription); ok {
		return s.Stats()
	}
	return brokers.Stats{}
}

// EarlySettle names the transport's negative control: a correct strategy
// whose consumers' driver settles every delivery the moment it receives
// it, before the handler ran (brokers.SubscribeOptions.SettleOnReceipt:
// RabbitMQ's ack on receipt, Kafka's polled position committed on fetch,
// RocketMQ's pulled offset committed on pull) — the mistake of a consumer
// that acknowledges too early, whatever its SQL. A consumer that dies
// holding deliveries it received loses them. `bench conform` runs it over
// tx and batch as "transport-early-settle/tx" and "…/batch"; `bench run`
// does not know it.
const EarlySettle = "transport-early-settle"

// SettlingEarly is st, a registered database-only strategy, as the
// transport's negative control (EarlySettle): named EarlySettle/st,
// broken, applying events as st does.
func SettlingEarly(st inbox.Strategy) inbox.Strategy { return earlySettle{st} }

type earlySettle struct{ inbox.Strategy }

// Name implements inbox.Strategy: EarlySettle/NAME.
func (e earlySettle) Name() string { return EarlySettle + "/" + e.Strategy.Name() }

// Description implements inbox.Strategy.
func (e earlySettle) Description() string {
	return "negative control of the transport: " + e.Strategy.Name() + " with a driver that settles each delivery on receipt, before the handler ran"
}

// Broken implements inbox.Strategy: a negative control.
func (earlySettle) Broken() bool { return true }

// Control is the negative control the strategy stands for, as conform's
// scenarios name it among those they catch: EarlySettle, whatever the
// strategy under it.
func (earlySettle) Control() string { return EarlySettle }

// PrefersBatches implements inbox.Batching as the strategy under it does.
func (e earlySettle) PrefersBatches() bool {
	b, ok := e.Strategy.(inbox.Batching)
	return ok && b.PrefersBatches()
}

// builtinStrategy looks a strategy up by name in the registry, or the
// transport's negative control over one (EarlySettle/NAME): how a worker
// process finds the strategy of a cell the coordinator opened.
func builtinStrategy(name string) (inbox.Strategy, error) {
	if inner, ok := strings.CutPrefix(name, EarlySettle+"/"); ok {
		st, err := inbox.Lookup(inner)
		if err != nil {
			return nil, err
		}
		return SettlingEarly(st), nil
	}
	return inbox.Lookup(name)
}
