package runner

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/inboxbench/inboxbench/inbox"
)

// waiter decides when a cell is done: every published message answered for
// good, nothing parked, every action done — or nothing settled for the
// stall timeout. It prints the progress line meanwhile.
type waiter struct {
	t        *tally
	in       *inbox.Inbox
	st       inbox.Strategy
	consumer string
	stall    time.Duration
	acts     *actions
	cons     consumers
	notes    *notes
	progress *progressLine
	// caughtUp, for a cell observed from outside (a service under
	// test), reports every published event seen taking effect; nil: the
	// cell's own consumers count their answers.
	caughtUp func() bool
}

// newWaiter waits for the cell's stream, its actions acts and its
// consumers cons. A cell stalls after the run's stall timeout, or after
// the broker's redelivery delay and some when that is longer.
func newWaiter(c *cell, acts *actions, cons consumers) *waiter {
	w := &waiter{t: c.t, in: c.in, st: c.strategy, consumer: c.consumer, acts: acts, cons: cons, notes: c.notes,
		stall:    max(c.o.Limits.Stall, c.b.Capabilities().RedeliveryDelay+10*time.Second),
		progress: &progressLine{w: c.o.Console.Progress, tty: c.o.Console.TTY, broker: c.broker, strategy: c.name, events: len(c.plan.Events), t: c.t}}
	if c.svc != nil {
		w.caughtUp = c.svc.caughtUp
		w.stall = max(w.stall, c.svc.spec.Handover.D()+10*time.Second)
	}
	return w
}

// done reports the stream finished: every event seen taking effect (a
// service's cell), or every message answered for good and nothing left
// parked that can move (the cell's own consumers); no action pending.
func (w *waiter) done(ctx context.Context, sw *sweeper) bool {
	if w.acts.busy() {
		return false
	}
	if w.caughtUp != nil {
		return w.caughtUp()
	}
	if w.t.handled.Load() < w.t.c.published.Load() {
		return false
	}
	done, err := sw.settle(ctx)
	return err == nil && done
}

// wait returns nil once the stream is done, or the error that ends it.
func (w *waiter) wait(ctx context.Context) error {
	last, lastChange := w.t.settled.Load(), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	sw := &sweeper{in: w.in, st: w.st, consumer: w.consumer, t: w.t}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-w.cons.failed():
			return err
		case <-tick.C:
		}
		if s := w.t.settled.Load(); s != last || w.acts.acting.Load() > 0 {
			last, lastChange = s, time.Now()
		}
		quiet := time.Since(lastChange)
		if w.done(ctx, sw) {
			return nil
		}
		if quiet > w.stall && w.cons.lost() > 0 && !w.acts.busy() && w.parkedNone(ctx) {
			// A worker was killed from outside before it could report the
			// messages it had answered last, so the count cannot reach the
			// total. Nothing moved for the whole stall timeout (longer
			// than the broker takes to hand a dead consumer's work on) and
			// nothing is parked: the stream is done, and the checker
			// judges the database.
			w.notes.add(fmt.Sprintf("%d worker(s) vanished without a final report; the cell ended after %s without deliveries with %d of %d answers counted",
				w.cons.lost(), w.stall, w.t.handled.Load(), w.t.c.published.Load()))
			return nil
		}
		if quiet > w.stall && w.caughtUp != nil && w.acts.acting.Load() == 0 {
			// Nothing the service did reached its tables for the whole
			// stall timeout (faults still to fire wait for a progress that
			// did not come): what it never applied is the checker's to name.
			w.notes.add(fmt.Sprintf("nothing took effect for %s with %d of the published events seen taking effect: the cell ended and the checker judges the tables", w.stall, w.t.handled.Load()))
			return nil
		}
		if quiet > w.stall {
			return fmt.Errorf("stalled: no delivery settled for %s with %d of %d messages answered (the checker lists what is missing)",
				w.stall, w.t.handled.Load(), w.t.c.published.Load())
		}
		w.progress.newFailures()
		w.progress.maybePrint()
	}
}

func (w *waiter) parkedNone(ctx context.Context) bool {
	n, err := inbox.ParkedCount(ctx, w.in.Pool(), w.in.Schema(), w.consumer)
	return err == nil && n == 0
}

// sweeper settles the end of a stream whose messages were all answered
// while some events stayed parked: their predecessor committed while
// their drain check ran (the one-statement strategies drain after their
// commit). It sweeps for them once a second, as a production consumer
// would.
type sweeper struct {
	in       *inbox.Inbox
	st       inbox.Strategy
	consumer string
	t        *tally
	last     time.Time
	empty    int
}

// newSweeper sweeps the cell's parked events.
func newSweeper(c *cell) *sweeper {
	return &sweeper{in: c.in, st: c.strategy, consumer: c.consumer, t: c.t}
}

// settle reports whether nothing is parked, or nothing parked can move any
// more (three sweeps drained nothing: the predecessor will never come; the
// checker reports what stays parked).
func (s *sweeper) settle(ctx context.Context) (bool, error) {
	n, err := inbox.ParkedCount(ctx, s.in.Pool(), s.in.Schema(), s.consumer)
	if err != nil || n == 0 {
		return err == nil, err
	}
	if time.Since(s.last) <= time.Second {
		return false, nil
	}
	s.last = time.Now()
	outs, _ := inbox.DrainParkedWith(ctx, s.st, s.in, s.consumer)
	s.t.countAll(outs)
	if len(outs) > 0 {
		s.t.settled.Add(1)
		s.empty = 0
		return false, nil
	}
	s.empty++
	return s.empty >= 3, nil
}

// progressLine prints a cell's progress: redrawn every second on a
// terminal, a line every five seconds otherwise.
type progressLine struct {
	w                io.Writer
	tty              bool
	broker, strategy string
	events           int
	start            time.Time
	t                *tally
	printed          time.Time
	failureKinds     map[string]bool
	// phase, when set, says where a steady cell is (warming up,
	// measuring) instead of how many events are left.
	phase func() string
	// lastEffects and lastAt are the effects at the previous line.
	lastEffects int64
	lastAt      time.Time
}

// recentRate is the effect rate since the previous line.
func (p *progressLine) recentRate(effects int64) float64 {
	now := time.Now()
	from := p.lastAt
	if from.IsZero() {
		from = p.start
	}
	r := float64(effects-p.lastEffects) / max(now.Sub(from).Seconds(), 0.001)
	p.lastEffects, p.lastAt = effects, now
	return r
}

// newFailures prints the first failure of each kind as soon as it shows.
func (p *progressLine) newFailures() {
	for _, f := range p.t.failures() {
		if p.failureKinds[f.Kind] {
			continue
		}
		if p.failureKinds == nil {
			p.failureKinds = map[string]bool{}
		}
		p.failureKinds[f.Kind] = true
		what := "retried within the bound, then dead-lettered"
		if !f.Retryable {
			what = "dead-lettered: it would fail the same way again"
		}
		if p.tty {
			fmt.Fprint(p.w, "\r\033[K")
		}
		fmt.Fprintf(p.w, "%s/%s: applying %s failed: %s (%s)\n", p.broker, p.strategy, f.Event, describeFailure(f), what)
	}
}

func (p *progressLine) maybePrint() {
	every := 5 * time.Second
	if p.tty {
		every = time.Second
	}
	if time.Since(p.printed) < every {
		return
	}
	if p.printed.IsZero() {
		// The first line comes after a full interval, not at once.
		p.printed = time.Now()
		return
	}
	p.printed = time.Now()
	s := p.t.c.snapshot()
	rate := float64(s.Effects) / max(time.Since(p.start).Seconds(), 0.001)
	left := "?"
	if rate > 0 {
		remaining := float64(int64(p.events) - s.Effects)
		left = (time.Duration(max(remaining, 0)/rate) * time.Second).Round(time.Second).String()
	}
	line := fmt.Sprintf("%s/%s: %d/%d effects, %.0f/s, backlog %d, dedup hits %d, e2e p99 %s, ~%s left",
		p.broker, p.strategy, s.Effects, p.events, rate, s.Published-p.t.handled.Load(),
		s.Duplicates, fmtMicros(max(p.t.meters.recentP99(), p.t.remoteP99.Load())), left)
	if p.phase != nil {
		line = fmt.Sprintf("%s/%s: %s, %d effects, %.0f/s, backlog %d, dedup hits %d, e2e p99 %s",
			p.broker, p.strategy, p.phase(), s.Effects, p.recentRate(s.Effects), s.Published-p.t.handled.Load(),
			s.Duplicates, fmtMicros(max(p.t.meters.recentP99(), p.t.remoteP99.Load())))
	}
	if s.Failed > 0 {
		line += fmt.Sprintf(", dead-lettered after failures %d", s.Failed)
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// clear removes a redrawn line.
func (p *progressLine) clear() {
	if p.tty && !p.printed.IsZero() {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
