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

// rateSteps is what the steps of one cell's rate search share.
type rateSteps struct {
	c       *cell
	sampler *inbox.ContentionSampler
	o       RateSearch
	steps   int // steps published, each a segment of its own
}

// stepAim is what a step publishes at, and how long its window is.
type stepAim struct {
	phase  string
	rate   float64
	window time.Duration
}

// search runs the cell's rate search: ramp and bisection, then the steps
// at fixed fractions of the MSR. Each step is judged by the cell's step
// judge once it drained; the streamed result carries what the search
// found.
func (c *cell) search(ctx context.Context, cons consumers, sampler *inbox.ContentionSampler) streamed {
	if c.steps.keepInbox {
		c.notes.add("the inbox holds prefilled history, so it is kept between the rate search's steps and grows from one to the next")
	}
	s := streamed{started: true, start: time.Now()}
	if err := cons.start(ctx); err != nil {
		return streamed{err: errors.Join(err, cons.stop(ctx))}
	}
	e := &rateSteps{c: c, sampler: sampler, o: c.o.Search.withDefaults()}
	seriesCtx, stopSeries := context.WithCancel(ctx)
	series := sampleSeries(seriesCtx, c.t)
	s.rate, s.err = e.run(ctx)
	if s.rate.Uncertain != "" {
		c.notes.add("rate search: " + s.rate.Uncertain)
	}
	s.pubEnd = time.Now()
	s.err = errors.Join(s.err, cons.stop(ctx))
	stopSeries()
	s.series = <-series
	return s
}

// run searches until the searcher is done, a step fails or ctx ends.
func (e *rateSteps) run(ctx context.Context) (*results.RateSearch, error) {
	rs := &results.RateSearch{Criteria: e.o.criteria()}
	sr := newSearcher(e.o)
	measuredAt := -1.0 // the MSR the steps in rs.At were measured at
	var err error
	for ctx.Err() == nil && err == nil {
		rate, phase, ok := sr.next()
		if !ok {
			// Converged (or stopped): measure at fractions of the MSR,
			// once per MSR. A step there that fails contradicts it, and
			// the search goes on (searcher.contradiction).
			msr, _, _, _ := sr.result()
			if msr == measuredAt {
				break
			}
			measuredAt = msr
			rs.Steps = append(rs.Steps, rs.At...) // measured at an MSR that did not hold
			rs.At, err = e.atRates(ctx, msr, sr)
			continue
		}
		var st results.RateStep
		st, err = e.step(ctx, stepAim{phase, rate, e.o.Step - e.o.Warmup})
		e.o.judgeStep(&st)
		sr.record(st)
		rs.Steps = append(rs.Steps, st)
		e.print(st)
	}
	rs.MSR, rs.LimitedBy, rs.Confirmed, rs.Uncertain = sr.result()
	return rs, err
}

// atRates measures the steps at fixed fractions of the MSR and at the
// absolute rates asked for, each one step and a half long. Those below
// the MSR are evidence for the search too: sr records them.
func (e *rateSteps) atRates(ctx context.Context, msr float64, sr *searcher) ([]results.RateStep, error) {
	type point struct{ fraction, rate float64 }
	var pts []point
	if msr > 0 {
		for _, f := range e.o.Fractions {
			pts = append(pts, point{f, f * msr})
		}
	}
	for _, r := range e.o.Rates {
		pts = append(pts, point{0, r})
	}
	var out []results.RateStep
	for _, p := range pts {
		st, err := e.step(ctx, stepAim{"at", p.rate, (e.o.Step - e.o.Warmup) * 3 / 2})
		st.Fraction = p.fraction
		e.o.judgeStep(&st)
		if err == nil && st.Rate < msr {
			sr.record(st)
		}
		out = append(out, st)
		e.print(st)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// step publishes a fresh segment of the workload at the aim's rate, warms
// up until the effect rate settles at it (at most twice the search's
// warm-up), measures a window of the aim's length, then stops publishing,
// waits until the segment is drained, and has it judged.
func (e *rateSteps) step(ctx context.Context, aim stepAim) (results.RateStep, error) {
	c := e.c
	i := e.steps
	e.steps++
	st := results.RateStep{Phase: aim.phase, Rate: math.Round(aim.rate)}
	spec := e.segmentSpec(i, aim.rate)
	stream := workload.NewStreamSegment(spec, fmt.Sprintf("s%02d-", i))
	defer stream.Close()
	f := streamFeed(stream, max(1, spec.Publishers))
	pub := newPublisher(c, f, spec)
	start := time.Now()
	c.t.warmEnd.Store(math.MaxInt64)
	w := e.watch(ctx, start, pub, aim)
	err := pub.run(ctx, start)
	close(w.quit)
	m := <-w.done
	plan, _ := f.published()
	if err != nil {
		return st, errors.Join(err, c.steps.step(ctx, plan, false))
	}
	st.WarmupS, st.WindowS = m.warmup.Seconds(), m.window.Seconds()
	if m.window > 0 {
		st.Achieved = m.published / m.window.Seconds()
	}
	st.BacklogSlope = backlogSlope(m.ts, m.backlog)
	st.PublishLagMs = float64(pub.lagSummary().P99) / 1000
	drained, err := e.drain(ctx, max(30*time.Second, 3*(m.warmup+m.window)))
	st.DrainS = drained.Seconds()
	st.E2E, st.Dedup = c.t.meters.takeStep()
	st.LockWaitShare = e.sampler.Totals().Share(m.totals)
	return st, errors.Join(err, c.steps.step(ctx, plan, err == nil))
}

// stepJudge judges each step of a rate search once it drained, and then
// empties the cell's tables for the next one: every step starts from the
// same inbox (a search publishes millions of events: judged at the end,
// they held gigabytes in the checker, and an inbox growing from step to
// step made the later steps, and so the MSR, depend on the order of the
// steps), and the checker holds one step at a time. It is the checker of
// a rate search's cell: its verdict is that of every step.
type stepJudge struct {
	c *cell
	// keepInbox: the inbox was prefilled with history, which stays; it
	// then grows from step to step (a note says so).
	keepInbox    bool
	noCheckpoint bool
	v            verdict
}

func newStepJudge(c *cell) *stepJudge {
	return &stepJudge{c: c, keepInbox: c.o.Spec.InboxPrefill > 0,
		v: verdict{inv: results.Invariants{Verdict: results.VerdictPass, Anomalies: map[string]int64{}, Examples: map[string][]string{}}}}
}

// step judges one step's plan, forgets its messages and decisions in the
// cell's tally (they are not delivered again), and empties the tables
// when clear. The audit log is flushed first.
func (j *stepJudge) step(ctx context.Context, plan *workload.Plan, clear bool) error {
	c := j.c
	if err := c.audit.flush(ctx); err != nil {
		return err
	}
	inv, effects, err := Check(ctx, c.pool, c.tables(), plan)
	if err != nil {
		return err
	}
	j.v.effects += effects
	for name, n := range inv.Anomalies {
		addAnomaly(&j.v.inv, name, n, inv.Examples[name])
	}
	c.t.forget(plan)
	if !clear {
		return nil
	}
	if err := inbox.Clear(ctx, c.pool, c.id, j.keepInbox, c.o.Measure.Audit); err != nil {
		return err
	}
	return j.checkpoint(ctx)
}

// verdict is every step's: the steps were judged as they drained.
func (j *stepJudge) verdict(context.Context, *workload.Plan) (verdict, error) { return j.v, nil }

// checkpoint starts the next step right after a checkpoint, so that every
// step writes the same full-page images into the WAL rather than only the
// one a checkpoint happened to fall in (a step at 60k events/s writes
// about 300 MB of WAL: with max_wal_size at its default of 1 GB, a
// checkpoint landed in about every third step). Without the right to
// (PostgreSQL 15's pg_checkpoint role), it says so once.
func (j *stepJudge) checkpoint(ctx context.Context) error {
	if j.noCheckpoint {
		return nil
	}
	allowed, err := inbox.Checkpoint(ctx, j.c.pool)
	if !allowed {
		j.noCheckpoint = true
		j.c.notes.add("the rate search's steps did not start at a checkpoint: the role may not run CHECKPOINT (GRANT pg_checkpoint TO it), so a checkpoint during a step slows that step alone")
	}
	return err
}

// segmentSpec is the workload of step i: the cell's workload at rate,
// streamed in chunks of about two seconds' events, with a seed of its
// own.
func (e *rateSteps) segmentSpec(i int, rate float64) *workload.Spec {
	spec := *e.c.o.Spec
	spec.Seed += int64(i) + 1
	spec.PublishRate, spec.Duration, spec.Warmup, spec.Measure = rate, 0, 0, 0
	spec.Events = max(int(math.Ceil(2*rate)), spec.Aggregates)
	spec.Faults.ConsumerRestarts = 0 // a restart mid-step would measure the restart
	return &spec
}

// stepMeasure is what watching a step found in its window.
type stepMeasure struct {
	warmup, window time.Duration
	ts, backlog    []float64
	published      float64 // messages confirmed in the window
	totals         inbox.Totals
}

// stepWatch drives a step: it samples the effects every 100ms until the
// rate settles at the step's (or the warm-up limit passes), then samples
// the backlog over the window, and stops the publisher when the window is
// up.
type stepWatch struct {
	e     *rateSteps
	pub   *publisher
	aim   stepAim
	start time.Time
	quit  chan struct{}
	done  chan stepMeasure
	// warm are the warm-up's samples; windowStart, once set, the start of
	// the window, with pub0 the messages confirmed then.
	warm        []sample
	windowStart time.Time
	pub0        int64
}

// watch starts watching a step that publishes through pub from start.
func (e *rateSteps) watch(ctx context.Context, start time.Time, pub *publisher, aim stepAim) *stepWatch {
	w := &stepWatch{e: e, pub: pub, aim: aim, start: start, quit: make(chan struct{}), done: make(chan stepMeasure, 1)}
	go w.run(ctx)
	return w
}

// run samples every 100ms until the window is up (then it stops the
// publisher), the step ends (quit) or ctx ends, and delivers what it
// measured.
func (w *stepWatch) run(ctx context.Context) {
	var m stepMeasure
	defer func() { w.done <- m }()
	defer w.pub.halt()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.quit:
			return
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if w.sample(now, &m) {
				return
			}
		}
	}
}

// sample takes one sample at now: of the effects during the warm-up,
// which it ends once the rate settled (or its limit passed); of the
// backlog in the window. It reports whether the window is up.
func (w *stepWatch) sample(now time.Time, m *stepMeasure) bool {
	t, o := w.e.c.t, w.e.o
	if w.windowStart.IsZero() {
		w.warm = append(w.warm, sample{at: now.Sub(w.start), effects: t.c.effects.Load()})
		if !settledOver(w.warm, o.Warmup/2, w.aim.rate, time.Second) && now.Sub(w.start) < 2*o.Warmup {
			return false
		}
		w.windowStart, m.warmup = now, now.Sub(w.start)
		w.pub0, m.totals = t.c.published.Load(), w.e.sampler.Totals()
		t.warmEnd.Store(now.UnixNano())
		w.pub.noteLagsFrom(now)
		t.meters.takeStep() // what was decided during the warm-up is not the step's
		return false
	}
	m.ts = append(m.ts, now.Sub(w.start).Seconds())
	m.backlog = append(m.backlog, float64(t.c.published.Load()-t.handled.Load()))
	if now.Sub(w.windowStart) < w.aim.window {
		return false
	}
	m.window = now.Sub(w.windowStart)
	m.published = float64(t.c.published.Load() - w.pub0)
	return true
}

// drain waits until every published message was answered and nothing is
// parked, for at most limit, or until nothing settled for the stall
// timeout.
func (e *rateSteps) drain(ctx context.Context, limit time.Duration) (time.Duration, error) {
	t, stall := e.c.t, e.c.o.Limits.Stall
	start := time.Now()
	sw := newSweeper(e.c)
	last, lastChange := t.settled.Load(), time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if t.handled.Load() >= t.c.published.Load() {
			if done, err := sw.settle(ctx); err == nil && done {
				return time.Since(start), nil
			}
		}
		if s := t.settled.Load(); s != last {
			last, lastChange = s, time.Now()
		}
		switch {
		case time.Since(lastChange) > stall:
			return time.Since(start), fmt.Errorf("stalled: no delivery settled for %s while draining a rate step, with %d of %d messages answered",
				stall, t.handled.Load(), t.c.published.Load())
		case time.Since(start) > limit:
			return time.Since(start), fmt.Errorf("a rate step's backlog did not drain within %s (%d of %d messages answered): the search stops here",
				limit.Round(time.Second), t.handled.Load(), t.c.published.Load())
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-tick.C:
		}
	}
}

// print writes a step's line to the progress output.
func (e *rateSteps) print(st results.RateStep) {
	verdict := "sustainable"
	if !st.Sustainable {
		verdict = "NOT sustainable: " + string(st.Limit)
	}
	c := e.c
	fmt.Fprintf(c.o.Console.Progress, "%s/%s: %-6s %s/s: achieved %s/s, backlog %+.0f/s, publish lag %s, e2e p99 %s, lock waits %s, drained in %.1fs: %s\n",
		c.broker, c.strategy.Name(), st.Phase, results.FormatRate(st.Rate), results.FormatRate(st.Achieved), st.BacklogSlope,
		time.Duration(st.PublishLagMs*float64(time.Millisecond)).Round(time.Millisecond), fmtMicros(st.E2E.P99),
		results.FormatShare(st.LockWaitShare), st.DrainS, verdict)
}
