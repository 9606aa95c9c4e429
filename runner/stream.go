package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// streamed is what streaming a cell's plan produced.
type streamed struct {
	started       bool                   // the consumers started: the stream ran
	plan          *workload.Plan         // what was published: the plan, or less when cut short
	rate          *results.RateSearch    // what a rate search found
	contention    inbox.ContentionReport // the contention sampler's, over the whole stream
	start, pubEnd time.Time
	window        *results.Window // a steady cell's warm-up and window
	roomWait      time.Duration   // how long the publisher waited for the backlog to shrink
	cpuBusy       float64
	sched         results.Summary // the harness's goroutines' waits for a CPU
	series        []float64
	timeline      *timeline
	faults        []results.Fault // the actions' faults, with their outage
	err           error
}

// consume starts the cell's consumers and streams the plan through them,
// or searches the cell's maximum sustainable rate, with the contention
// sampler and the workload's inbox retention running beside it.
func (c *cell) consume(ctx context.Context) streamed {
	hk := &inProcess{}
	h := newHandler(c, hk)
	c.ext.setHooks(hk)
	cons := c.consumers(h)
	quiet := c.waitQuiet(ctx)
	sampler, err := inbox.StartContention(ctx, c.o.Cfg.PGURL, AppName(c.id), 100*time.Millisecond)
	if err != nil {
		return streamed{err: err}
	}
	// Checkpoints are counted from before the cell's own: the
	// checkpointer may report that one only after CHECKPOINT returned.
	checkpoints, cperr := inbox.Checkpoints(ctx, c.pool)
	n, err := c.startAtCheckpoint(ctx)
	if err != nil {
		_, _ = sampler.Stop(ctx)
		return streamed{err: err}
	}
	checkpoints += n
	stopPrune := c.pruneDuring(ctx)
	c.ext.startRelay(ctx, c.in, c.o.Spec.Consumers)
	var s streamed
	if c.o.Search != nil {
		s = c.search(ctx, cons, sampler)
	} else {
		s = c.stream(ctx, cons)
	}
	stopPrune()
	if s.window != nil {
		s.window.QuietS = quiet.Seconds()
	}
	if c.o.Search == nil && cperr == nil {
		c.noteCheckpoints(ctx, checkpoints)
	}
	var serr error
	s.contention, serr = sampler.Stop(ctx)
	if serr != nil && s.err == nil && s.started {
		c.o.Console.Log.Warn("contention sampler", "err", serr)
	}
	if s.contention.TopMissing != "" {
		c.notes.add(s.contention.TopMissing)
	}
	return s
}

// waitQuiet has the host go quiet before the contention sampler starts:
// its polling is neither sampled nor counted as the host's load. Only
// cells measured for a time wait (steady cells, rate searches), not
// scenarios. It returns how long it waited.
func (c *cell) waitQuiet(ctx context.Context) time.Duration {
	q := c.o.Limits.Quiet
	if q <= 0 || (!c.steady() && c.o.Search == nil) {
		return 0
	}
	quiet, busy, ok := waitQuiet(ctx, q)
	if !ok && busy > 0 {
		c.notes.add(fmt.Sprintf("the host was still %.0f%% busy when the cell started, after %s waiting for it to go quiet: something besides the cell ran on it", 100*busy, quiet.Round(time.Second)))
	}
	return quiet
}

// startAtCheckpoint starts a measured stream right after a checkpoint (a
// rate search checkpoints before each step instead); it returns the
// checkpoints it started.
func (c *cell) startAtCheckpoint(ctx context.Context) (int64, error) {
	if !c.o.Measure.Latency || c.o.Search != nil {
		return 0, nil
	}
	allowed, err := inbox.Checkpoint(ctx, c.pool)
	switch {
	case err != nil:
		return 0, err
	case !allowed:
		c.notes.add("the cell did not start at a checkpoint: the role may not run CHECKPOINT (GRANT pg_checkpoint TO it), so a checkpoint made due by an earlier cell's WAL may slow this one")
		return 0, nil
	}
	return 1, nil
}

// noteCheckpoints notes the checkpoints PostgreSQL started while the cell
// streamed (since before, a reading of inbox.Checkpoints). Every cell
// starts right after one; another during the cell writes a full-page
// image of each page first touched after it, and the cell slows while it
// runs. On the local stack with max_wal_size at PostgreSQL's default of
// 1 GB, every none cell of the default workload met one about 15 s in,
// inside its measured window, and its rate fell over the window (trends
// of -9% to -23%); the stack now sets 4 GB.
func (c *cell) noteCheckpoints(ctx context.Context, before int64) {
	after, err := inbox.Checkpoints(ctx, c.pool)
	if err != nil || after <= before {
		return
	}
	maxWAL := "?"
	_ = c.pool.QueryRow(ctx, "SELECT current_setting('max_wal_size')").Scan(&maxWAL)
	c.notes.add(fmt.Sprintf("PostgreSQL started %d checkpoint(s) while the cell ran (max_wal_size %s): a checkpoint's full-page writes slow the cell while it lasts; a larger max_wal_size (or checkpoint_timeout) keeps them out of a cell", after-before, maxWAL))
}

// stream starts the consumers, publishes the plan with the mid-stream
// actions firing, waits until the stream is done, and stops everything.
// A steady-state cell (steady) publishes its workload's stream until its
// clock ends the window instead.
func (c *cell) stream(ctx context.Context, cons consumers) streamed {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	f, closeFeed := c.feed()
	defer closeFeed()
	pub := c.publisher(f)
	if c.o.Stream.Backlog {
		// The whole stream waits in the broker before any consumer starts:
		// what follows measures the drain.
		if err := pub.run(runCtx, time.Now()); err != nil {
			return streamed{err: err}
		}
		c.notes.add(fmt.Sprintf("backlog: %d messages published before the consumers started; events/s is the drain rate", c.t.c.published.Load()))
	}
	if err := cons.start(runCtx); err != nil {
		return streamed{err: errors.Join(err, cons.stop(ctx))}
	}
	list, err := c.actions()
	if err != nil {
		return streamed{err: errors.Join(err, cons.stop(ctx))}
	}
	acts := newActions(c, list, cons, f.total())
	w := newWaiter(c, acts, cons)
	cpu0, cpuOK := hostCPU()
	sched0 := readSched()
	s := streamed{started: true, start: time.Now()}
	w.progress.start = s.start
	window, stopWarm := c.warmUp(runCtx, s.start, pub, w)
	defer stopWarm()
	series := sampleTimeline(runCtx, c.t, len(acts.list) > 0)
	go acts.watch(runCtx)
	if !c.o.Stream.Backlog {
		s.err = pub.run(runCtx, s.start)
	}
	s.pubEnd = time.Now()
	s.window = window()
	c.published(&s, pub, f)
	if c.svc != nil {
		c.svc.expect(s.plan)
	}
	if s.err == nil {
		s.err = w.wait(runCtx)
	}
	if cpu1, ok := hostCPU(); ok && cpuOK {
		s.cpuBusy = cpu1.busySince(cpu0)
	}
	s.sched = readSched().since(sched0)
	stop()
	w.progress.clear()
	s.timeline = <-series
	s.series = s.timeline.effects
	s.faults = acts.faults.results(s.start, s.timeline)
	s.err = errors.Join(s.err, cons.stop(ctx), acts.failure())
	return s
}

// publisher is the stream's publisher of f: with the run's poison
// messages, and a steady cell without a rate bounded by the workload's
// backlog, or by its own consumption (backlog.go), starting at its floor.
func (c *cell) publisher(f *feed) *publisher {
	spec := c.o.Spec
	pub := newPublisher(c, f, spec)
	pub.poison = c.o.Stream.Poison
	switch {
	case pacesBacklog(spec, c.steady()):
		pub.backlog.Store(backlogFloor(spec))
	case c.steady() && spec.PublishRate == 0:
		pub.backlog.Store(int64(spec.Backlog()))
	}
	return pub
}

// paceBacklog is the steady clock's pace for pub: the backlog bound
// following the rate; nil when the bound is fixed.
func (c *cell) paceBacklog(pub *publisher) func(rate float64) {
	if !pacesBacklog(c.o.Spec, c.steady()) {
		return nil
	}
	return func(rate float64) { pub.backlog.Store(backlogBound(c.o.Spec, rate)) }
}

// warmUp starts the stream's warm-up at start. A steady cell's clock ends
// it once the rate settles (telling the publisher, the consumers and the
// progress line) and ends publishing when the window is up; any other
// cell warms up for the workload's warm-up. The returned window, called
// once publishing ended, stops the clock and returns its window (nil
// without a clock); stop ends the warm-up when the stream ends.
func (c *cell) warmUp(ctx context.Context, start time.Time, pub *publisher, w *waiter) (window func() *results.Window, stop func()) {
	if !c.steady() {
		stopWarm := c.t.startWarmup(start, c.o.Spec.Warmup.D())
		w.cons.warm(ctx, time.Unix(0, c.t.warmEnd.Load()))
		return func() *results.Window { return nil }, func() { stopWarm() }
	}
	clockCtx, stopClock := context.WithCancel(ctx)
	clock := &steadyClock{spec: c.o.Spec, t: c.t, cons: w.cons, start: start, stopPub: pub.halt, done: make(chan struct{}),
		onWarm: pub.noteLagsFrom, // the publish lag is the window's too
		pace:   c.paceBacklog(pub),
		analyze: func(ctx context.Context) {
			if err := inbox.Analyze(ctx, c.pool, c.id); err != nil && ctx.Err() == nil {
				c.notes.add(fmt.Sprintf("the cell's tables could not be analysed early in the warm-up (%v): until autovacuum does, the planner guesses their statistics", err))
			}
		}}
	c.t.warmEnd.Store(math.MaxInt64) // nothing is measured until the rate settles
	w.progress.phase = clock.phase
	go clock.run(clockCtx)
	return func() *results.Window {
		stopClock()
		<-clock.done
		w := clock.result()
		w.MaxBacklog = pub.backlog.Load()
		return w
	}, stopClock
}

// published takes what the publisher did into s: its lag, its waits for
// the backlog to shrink, and the plan of what was confirmed, which is
// what the checker judges.
func (c *cell) published(s *streamed, pub *publisher, f *feed) {
	pub.mergeLag(c.t.meters)
	s.roomWait = time.Duration(pub.roomWait.Load())
	var complete bool
	s.plan, complete = f.published()
	if s.err == nil && !complete && !c.steady() {
		c.notes.add(fmt.Sprintf("publishing stopped when the workload's duration was up: %d of %d events could take effect, and the checker judges those", len(s.plan.Events), len(c.plan.Events)))
	}
}

// steady reports whether the cell runs for a time, at steady state: its
// workload measures a window, and no scenario gave it a plan of its own.
func (c *cell) steady() bool { return c.o.Spec.Steady() && c.o.Stream.Plan == nil }

// feed is what the cell publishes: the workload's stream for a steady
// cell, else its plan.
func (c *cell) feed() (*feed, func()) {
	owners := max(1, c.o.Spec.Publishers)
	if !c.steady() {
		return planFeed(c.plan, owners), func() {}
	}
	st := workload.NewStream(c.o.Spec)
	return streamFeed(st, owners), st.Close
}
