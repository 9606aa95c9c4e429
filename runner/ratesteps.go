package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// stepEnv is what the steps of one cell's rate search share.
type stepEnv struct {
	c       *cell
	b       brokers.Broker
	in      *inbox.Inbox
	t       *tally
	sampler *inbox.ContentionSampler
	notes   *notes
	o       RateSearch
	judge   *stepJudge
	steps   int // steps published, each a segment of its own
}

// search runs the cell's rate search: ramp and bisection, then the steps
// at fixed fractions of the MSR. Each step is judged by j once it
// drained; the streamed result carries the verdict of them all and what
// the search found.
func (c *cell) search(ctx context.Context, b brokers.Broker, in *inbox.Inbox, cons consumers, t *tally, sampler *inbox.ContentionSampler, ns *notes, j *stepJudge) streamed {
	s := streamed{started: true, start: time.Now()}
	if err := cons.start(ctx); err != nil {
		return streamed{err: errors.Join(err, cons.stop(ctx))}
	}
	env := &stepEnv{c: c, b: b, in: in, t: t, sampler: sampler, notes: ns, o: c.o.Search.withDefaults(), judge: j}
	seriesCtx, stopSeries := context.WithCancel(ctx)
	series := sampleSeries(seriesCtx, t)
	rs := &results.RateSearch{Criteria: env.o.criteria()}
	sr := newSearcher(env.o)
	measuredAt := -1.0 // the MSR the steps in rs.At were measured at
	for ctx.Err() == nil && s.err == nil {
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
			rs.At, s.err = env.atRates(ctx, msr, sr)
			continue
		}
		var st results.RateStep
		st, s.err = env.step(ctx, phase, rate)
		env.o.judgeStep(&st)
		sr.record(st)
		rs.Steps = append(rs.Steps, st)
		env.print(st)
	}
	rs.MSR, rs.LimitedBy, rs.Confirmed, rs.Uncertain = sr.result()
	if rs.Uncertain != "" {
		ns.add("rate search: " + rs.Uncertain)
	}
	s.pubEnd = time.Now()
	s.err = errors.Join(s.err, cons.stop(ctx))
	stopSeries()
	s.series = <-series
	s.judged, s.rate = j, rs
	return s
}

// atRates measures the steps at fixed fractions of the MSR and at the
// absolute rates asked for, each one step and a half long. Those below
// the MSR are evidence for the search too: sr records them.
func (e *stepEnv) atRates(ctx context.Context, msr float64, sr *searcher) ([]results.RateStep, error) {
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
		st, err := e.stepFor(ctx, "at", p.rate, (e.o.Step-e.o.Warmup)*3/2)
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

func (e *stepEnv) step(ctx context.Context, phase string, rate float64) (results.RateStep, error) {
	return e.stepFor(ctx, phase, rate, e.o.Step-e.o.Warmup)
}

// stepFor publishes a fresh segment of the workload at rate, warms up
// until the effect rate settles at it (at most twice the search's
// warm-up), measures a window of the given length, then stops publishing,
// waits until the segment is drained, and has it judged.
func (e *stepEnv) stepFor(ctx context.Context, phase string, rate float64, window time.Duration) (results.RateStep, error) {
	i := e.steps
	e.steps++
	st := results.RateStep{Phase: phase, Rate: math.Round(rate)}
	spec := e.segmentSpec(i, rate)
	stream := workload.NewStreamSegment(spec, fmt.Sprintf("s%02d-", i))
	defer stream.Close()
	f := streamFeed(stream, max(1, spec.Publishers))
	pub := newPublisher(e.b, e.c.topic(), f, spec, e.t, e.notes)
	stop := make(chan struct{})
	pub.stop = stop
	start := time.Now()
	e.t.warmEnd.Store(math.MaxInt64)
	w := e.watch(ctx, start, pub, stop, rate, window)
	err := pub.run(ctx, start)
	close(w.quit)
	m := <-w.done
	plan, _ := f.published()
	if err != nil {
		return st, errors.Join(err, e.judge.step(ctx, e.c, plan, false))
	}
	st.WarmupS, st.WindowS = m.warmup.Seconds(), m.window.Seconds()
	if m.window > 0 {
		st.Achieved = m.published / m.window.Seconds()
	}
	st.BacklogSlope = backlogSlope(m.ts, m.backlog)
	st.PublishLagMs = float64(pub.lagSummary().P99) / 1000
	drained, err := e.drain(ctx, max(30*time.Second, 3*(m.warmup+m.window)))
	st.DrainS = drained.Seconds()
	st.E2E, st.Dedup = e.t.meters.takeStep()
	st.LockWaitShare = e.sampler.Totals().Share(m.totals)
	return st, errors.Join(err, e.judge.step(ctx, e.c, plan, err == nil))
}

// stepJudge judges each step of a rate search once it drained, and then
// empties the cell's tables for the next one: every step starts from the
// same inbox (a search publishes millions of events: judged at the end,
// they held gigabytes in the checker, and an inbox growing from step to
// step made the later steps, and so the MSR, depend on the order of the
// steps), and the checker holds one step at a time.
type stepJudge struct {
	pool *pgxpool.Pool
	// audit is flushed before each step is judged.
	audit *cellAudit
	// keepInbox: the inbox was prefilled with history, which stays; it
	// then grows from step to step (a note says so).
	keepInbox bool
	// t forgets a judged step's messages and decisions: they are not
	// delivered again.
	t            *tally
	notes        *notes
	noCheckpoint bool
	inv          results.Invariants
	effects      int64
}

func newStepJudge(pool *pgxpool.Pool, audit *cellAudit, t *tally, ns *notes, keepInbox bool) *stepJudge {
	return &stepJudge{pool: pool, audit: audit, t: t, notes: ns, keepInbox: keepInbox,
		inv: results.Invariants{Verdict: results.VerdictPass, Anomalies: map[string]int64{}, Examples: map[string][]string{}}}
}

// step judges one step's plan, and empties the tables when clear.
func (j *stepJudge) step(ctx context.Context, c *cell, plan *workload.Plan, clear bool) error {
	if err := j.audit.flush(ctx); err != nil {
		return err
	}
	inv, effects, err := Check(ctx, j.pool, c.id, c.consumer, plan, c.o.Measure.Audit)
	if err != nil {
		return err
	}
	j.effects += effects
	for name, n := range inv.Anomalies {
		addAnomaly(&j.inv, name, n, inv.Examples[name])
	}
	j.t.forget(plan)
	if !clear {
		return nil
	}
	if err := inbox.Clear(ctx, j.pool, c.id, j.keepInbox, c.o.Measure.Audit); err != nil {
		return err
	}
	return j.checkpoint(ctx)
}

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
	allowed, err := inbox.Checkpoint(ctx, j.pool)
	if !allowed {
		j.noCheckpoint = true
		j.notes.add("the rate search's steps did not start at a checkpoint: the role may not run CHECKPOINT (GRANT pg_checkpoint TO it), so a checkpoint during a step slows that step alone")
	}
	return err
}

// segmentSpec is the workload of step i: the cell's workload at rate,
// streamed in chunks of about two seconds' events, with a seed of its
// own.
func (e *stepEnv) segmentSpec(i int, rate float64) *workload.Spec {
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
	quit chan struct{}
	done chan stepMeasure
}

func (e *stepEnv) watch(ctx context.Context, start time.Time, pub *publisher, stop chan struct{}, rate float64, window time.Duration) *stepWatch {
	w := &stepWatch{quit: make(chan struct{}), done: make(chan stepMeasure, 1)}
	limit := 2 * e.o.Warmup
	go func() {
		var m stepMeasure
		defer func() { w.done <- m }()
		stopped := false
		stopPub := func() {
			if !stopped {
				stopped = true
				close(stop)
			}
		}
		defer stopPub()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var warm []sample
		var pub0 int64
		var windowStart time.Time
		for {
			select {
			case <-w.quit:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if windowStart.IsZero() {
					warm = append(warm, sample{at: now.Sub(start), effects: e.t.c.effects.Load()})
					if !settledOver(warm, e.o.Warmup/2, rate, time.Second) && now.Sub(start) < limit {
						continue
					}
					windowStart, m.warmup = now, now.Sub(start)
					pub0, m.totals = e.t.c.published.Load(), e.sampler.Totals()
					e.t.warmEnd.Store(now.UnixNano())
					pub.noteLagsFrom(now)
					e.t.meters.takeStep() // what was decided during the warm-up is not the step's
					continue
				}
				m.ts = append(m.ts, now.Sub(start).Seconds())
				m.backlog = append(m.backlog, float64(e.t.c.published.Load()-e.t.handled.Load()))
				if now.Sub(windowStart) >= window {
					m.window = now.Sub(windowStart)
					m.published = float64(e.t.c.published.Load() - pub0)
					stopPub()
					return
				}
			}
		}
	}()
	return w
}

// drain waits until every published message was answered and nothing is
// parked, for at most limit, or until nothing settled for the stall
// timeout.
func (e *stepEnv) drain(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	sw := &sweeper{in: e.in, st: e.c.strategy, consumer: e.c.consumer, t: e.t}
	last, lastChange := e.t.settled.Load(), time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if e.t.handled.Load() >= e.t.c.published.Load() {
			if done, err := sw.settle(ctx); err == nil && done {
				return time.Since(start), nil
			}
		}
		if s := e.t.settled.Load(); s != last {
			last, lastChange = s, time.Now()
		}
		switch {
		case time.Since(lastChange) > e.c.o.Limits.Stall:
			return time.Since(start), fmt.Errorf("stalled: no delivery settled for %s while draining a rate step, with %d of %d messages answered",
				e.c.o.Limits.Stall, e.t.handled.Load(), e.t.c.published.Load())
		case time.Since(start) > limit:
			return time.Since(start), fmt.Errorf("a rate step's backlog did not drain within %s (%d of %d messages answered): the search stops here",
				limit.Round(time.Second), e.t.handled.Load(), e.t.c.published.Load())
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-tick.C:
		}
	}
}

// print writes a step's line to the progress output.
func (e *stepEnv) print(st results.RateStep) {
	verdict := "sustainable"
	if !st.Sustainable {
		verdict = "NOT sustainable: " + string(st.Limit)
	}
	fmt.Fprintf(e.c.o.Console.Progress, "%s/%s: %-6s %s/s: achieved %s/s, backlog %+.0f/s, publish lag %s, e2e p99 %s, lock waits %s, drained in %.1fs: %s\n",
		e.c.broker, e.c.strategy.Name(), st.Phase, results.FormatRate(st.Rate), results.FormatRate(st.Achieved), st.BacklogSlope,
		time.Duration(st.PublishLagMs*float64(time.Millisecond)).Round(time.Millisecond), fmtMicros(st.E2E.P99),
		results.FormatShare(st.LockWaitShare), st.DrainS, verdict)
}
