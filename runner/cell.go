package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// A cell is one broker × strategy: a fresh inbox schema, a fresh topic, the
// plan published through the broker, consumed by the cell's consumers into
// the inbox, measured, then judged. Its parts each have a file: the
// publisher (publisher.go), the handler (handler.go), the consumers
// (consumers.go, fleetconsumers.go), the mid-stream actions (actions.go) and the
// waiter (waiter.go); this file wires them.
type cell struct {
	o        *Options
	plan     *workload.Plan
	broker   string
	id       string // schema, topic and group names derive from it
	consumer string
	strategy inbox.Strategy
	fleet    *fleet // nil: consumers are goroutines of this process
	// askDurability says whether to ask the driver what its confirms
	// mean (once per broker and run); durability is its answer.
	askDurability bool
	durability    map[string]string
	// ext is the cell's external service, when its strategy calls one
	// (external.go); extFigures what it saw.
	ext        *cellExternal
	extFigures *results.External
}

var unsafeIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// cellID names the cell's schema, topic and consumer: fresh per run.
func cellID(runID, broker, strategy string) string {
	id := strings.ToLower(fmt.Sprintf("ib_%s_%s_%s", runID, broker, strategy))
	id = unsafeIdent.ReplaceAllString(id, "_")
	if len(id) > 60 {
		// Keep a hash of the whole id: long strategy names (user files)
		// that share a prefix must not share a schema.
		h := sha256.Sum256([]byte(id))
		id = id[:51] + "_" + hex.EncodeToString(h[:4])
	}
	return id
}

func (c *cell) topic() string { return strings.ReplaceAll(c.id, "_", "-") }
func (c *cell) group() string { return "ib-" + c.id }

// AppName is the application_name of a cell's connections, which the
// contention sampler and fault actions select by. PostgreSQL keeps 63
// bytes of it, so it is cut to that here: a longer name would match
// nothing in pg_stat_activity.
func AppName(cellID string) string {
	n := "inboxbench/" + cellID
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// runCell runs one cell; with askDurability it also returns what the
// broker's driver said its confirms mean (brokers.DurabilityReporter).
func runCell(ctx context.Context, o *Options, plan *workload.Plan, broker, strategy string, round int, fl *fleet, askDurability bool) (results.Cell, map[string]string) {
	id := cellID(o.RunID, broker, strategy)
	switch {
	case round <= 0:
		// A warm-up round (1-W … 0) has a schema and a topic of its own.
		id = cellID(o.RunID, broker, fmt.Sprintf("%s_w%d", strategy, round+o.WarmupRounds))
	case o.Rounds > 1:
		// Each round of a cell has a schema and a topic of its own.
		id = cellID(o.RunID, broker, fmt.Sprintf("%s_r%d", strategy, round))
	}
	res := results.Cell{Broker: broker, Strategy: strategy, Consumer: "balance-" + id, Schema: id}
	st, err := lookupStrategy(*o, strategy)
	if err != nil {
		res.Error = o.Cfg.RedactSecrets(err.Error())
		res.Invariants.Verdict = results.VerdictError
		return res, nil
	}
	res.Broken = st.Broken()
	if f, ok := st.(*inbox.FileStrategy); ok {
		res.StrategyFile, res.StrategyHash = filepath.Base(f.Path()), f.Hash()
	}
	c := &cell{o: o, plan: plan, broker: broker, id: id, consumer: res.Consumer, strategy: st, fleet: fl, askDurability: askDurability}
	if err := c.run(ctx, &res); err != nil {
		// A client library may quote its endpoint, credentials and all.
		res.Error = o.Cfg.RedactSecrets(err.Error())
		if res.Invariants.Verdict == "" {
			res.Invariants.Verdict = results.VerdictError
		}
	}
	return res, c.durability
}

// run sets the cell up, consumes its stream (or searches its maximum
// sustainable rate), judges what the database holds and fills res.
func (c *cell) run(ctx context.Context, res *results.Cell) error {
	ns := &notes{}
	t := newTally(c.o.Measure.Latency, c.o.Limits.Retry, len(c.plan.Publishes)+len(c.o.Stream.Poison))
	var err error
	if c.ext, err = c.setUpExternal(ctx, t); err != nil {
		return err
	}
	su, err := c.setUp(ctx, res, ns)
	if err != nil {
		return err
	}
	defer su.close(ctx)
	defer c.ext.stopRelay() // a cell that ended early never flushed it
	s := c.consume(ctx, su, t, ns)
	if !s.started {
		// Nothing was consumed, nor published: there is nothing to judge.
		return s.err
	}
	inv, effects, err := c.judge(ctx, su, t, s)
	if err != nil {
		return errors.Join(s.err, err)
	}
	return errors.Join(s.err, c.fillResult(res, t, s, inv, effects, ns))
}

// setup is what a cell runs on: its inbox schema, its audit log and its
// broker with the cell's topic.
type setup struct {
	pool  *pgxpool.Pool
	in    *inbox.Inbox
	audit *cellAudit
	b     brokers.Broker
}

// close releases the setup in the reverse order of setUp.
func (su *setup) close(ctx context.Context) {
	if su.b != nil {
		su.b.Close()
	}
	if su.audit != nil {
		su.audit.close(ctx)
	}
	su.pool.Close()
}

// setUp creates the cell's schema (prefilled as the workload says), starts
// its audit log, and opens the broker and creates the topic; it asks the
// driver what its confirms mean when the cell should. res records the
// audit mode and whether the broker is the baseline.
func (c *cell) setUp(ctx context.Context, res *results.Cell, ns *notes) (*setup, error) {
	pool, in, err := openInbox(ctx, c.o, c.id, c.strategy, true, ns, c.ext.inboxOptions)
	if err != nil {
		return nil, err
	}
	su := &setup{pool: pool, in: in}
	fail := func(err error) (*setup, error) {
		su.close(ctx)
		return nil, err
	}
	if err := c.prefill(ctx, pool, ns); err != nil {
		return fail(err)
	}
	if su.audit, err = c.startAudit(ctx, pool); err != nil {
		return fail(err)
	}
	res.Audit = su.audit.mode.Describe()
	b, err := brokers.Open(ctx, c.broker, c.o.Cfg, nil)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", c.broker, err))
	}
	su.b = b
	res.Baseline = b.Capabilities().Baseline
	setupCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = b.Setup(setupCtx, c.topic(), c.o.Spec.Shards)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("%s: set up topic %s: %w", c.broker, c.topic(), err))
	}
	if c.askDurability {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c.durability = brokers.DurabilityOf(dctx, b, c.topic())
		cancel()
	}
	return su, nil
}

// consume starts the cell's consumers and streams the plan through them,
// or searches the cell's maximum sustainable rate, with the contention
// sampler and the workload's inbox retention running beside it.
func (c *cell) consume(ctx context.Context, su *setup, t *tally, ns *notes) streamed {
	hk := &inProcess{}
	h := newHandler(su.in, c.strategy, c.consumer, c.o.Spec, t, hk)
	c.ext.setHooks(hk)
	cons := c.consumers(su.b, h, ns)
	// The host goes quiet before the contention sampler starts: its
	// polling is neither sampled nor counted as the host's load.
	var quiet time.Duration
	if q := c.o.Limits.Quiet; q > 0 && (c.steady() || c.o.Search != nil) { // cells measured for a time, not scenarios
		var busy float64
		var ok bool
		if quiet, busy, ok = waitQuiet(ctx, q); !ok && busy > 0 {
			ns.add(fmt.Sprintf("the host was still %.0f%% busy when the cell started, after %s waiting for it to go quiet: something besides the cell ran on it", 100*busy, quiet.Round(time.Second)))
		}
	}
	sampler, err := inbox.StartContention(ctx, c.o.Cfg.PGURL, AppName(c.id), 100*time.Millisecond)
	if err != nil {
		return streamed{err: err}
	}
	// Checkpoints are counted from before the cell's own: the
	// checkpointer may report that one only after CHECKPOINT returned.
	checkpoints, cperr := inbox.Checkpoints(ctx, su.pool)
	if c.o.Measure.Latency && c.o.Search == nil { // a rate search checkpoints before each step
		if allowed, err := inbox.Checkpoint(ctx, su.pool); err != nil {
			_, _ = sampler.Stop(ctx)
			return streamed{err: err}
		} else if !allowed {
			ns.add("the cell did not start at a checkpoint: the role may not run CHECKPOINT (GRANT pg_checkpoint TO it), so a checkpoint made due by an earlier cell's WAL may slow this one")
		} else {
			checkpoints++
		}
	}
	stopPrune := c.pruneDuring(ctx, su.pool, ns)
	c.ext.startRelay(ctx, su.in, c.o.Spec.Consumers)
	var s streamed
	if c.o.Search != nil {
		keep := c.o.Spec.InboxPrefill > 0
		if keep {
			ns.add("the inbox holds prefilled history, so it is kept between the rate search's steps and grows from one to the next")
		}
		s = c.search(ctx, su.b, su.in, cons, t, sampler, ns, newStepJudge(su.pool, su.audit, t, ns, keep))
	} else {
		s = c.stream(ctx, su.b, su.in, cons, t, ns)
	}
	stopPrune()
	if s.window != nil {
		s.window.QuietS = quiet.Seconds()
	}
	if c.o.Search == nil && cperr == nil {
		c.noteCheckpoints(ctx, su.pool, checkpoints, ns)
	}
	var serr error
	s.contention, serr = sampler.Stop(ctx)
	if serr != nil && s.err == nil && s.started {
		c.o.Console.Log.Warn("contention sampler", "err", serr)
	}
	if s.contention.TopMissing != "" {
		ns.add(s.contention.TopMissing)
	}
	return s
}

// noteCheckpoints notes the checkpoints PostgreSQL started while the cell
// streamed (since before, a reading of inbox.Checkpoints). Every cell
// starts right after one; another during the cell writes a full-page
// image of each page first touched after it, and the cell slows while it
// runs. On the local stack with max_wal_size at PostgreSQL's default of
// 1 GB, every none cell of the default workload met one about 15 s in,
// inside its measured window, and its rate fell over the window (trends
// of -9% to -23%); the stack now sets 4 GB.
func (c *cell) noteCheckpoints(ctx context.Context, db inbox.DB, before int64, ns *notes) {
	after, err := inbox.Checkpoints(ctx, db)
	if err != nil || after <= before {
		return
	}
	maxWAL := "?"
	_ = db.QueryRow(ctx, "SELECT current_setting('max_wal_size')").Scan(&maxWAL)
	ns.add(fmt.Sprintf("PostgreSQL started %d checkpoint(s) while the cell ran (max_wal_size %s): a checkpoint's full-page writes slow the cell while it lasts; a larger max_wal_size (or checkpoint_timeout) keeps them out of a cell", after-before, maxWAL))
}

// judge gives what is still parked a last chance, completes the audit log
// and checks the database against what was published (or takes the rate
// search's step-by-step judgement): the invariants and the durable
// effects.
func (c *cell) judge(ctx context.Context, su *setup, t *tally, s streamed) (results.Invariants, int64, error) {
	// Anything still parked gets one last chance to drain (its predecessor
	// may have committed as the consumers stopped); what remains is stuck.
	// Its decisions are counted like every other: an event a snapshot
	// overtook while it waited is decided STALE here.
	outs, err := inbox.DrainParkedWith(ctx, c.strategy, su.in, c.consumer)
	if err != nil {
		c.o.Console.Log.Warn("final drain", "err", err)
	}
	t.countAll(outs)
	if err := c.ext.flush(ctx, su.in); err != nil {
		return results.Invariants{}, 0, err
	}
	if err := su.audit.finish(ctx); err != nil {
		return results.Invariants{}, 0, err
	}
	var inv results.Invariants
	var effects int64
	if s.judged != nil {
		inv, effects = s.judged.inv, s.judged.effects
	} else if inv, effects, c.extFigures, err = c.check(ctx, su, c.ext, s.plan); err != nil {
		return results.Invariants{}, 0, err
	}
	// The cell's tables are final: autovacuum on them would run during
	// the next cell.
	if err := inbox.Retire(ctx, su.pool, c.id); err != nil {
		c.o.Console.Log.Warn("retire the cell's schema", "err", err)
	}
	misses, examples := t.dedupMisses()
	judgeDecisions(&inv, misses, examples)
	return inv, effects, nil
}

// fillResult fills res with the judgement, the measurements and the
// notes. Events the cell gave up on make it ERROR, whatever the checker
// said of the rest: the error names them.
func (c *cell) fillResult(res *results.Cell, t *tally, s streamed, inv results.Invariants, effects int64, ns *notes) error {
	res.Invariants = inv
	fill(res, t, s, c.o.Spec.PublishRate)
	res.External = c.extFigures
	res.Failures = t.failures()
	res.Mode, res.Rate = c.mode(), s.rate
	if s.rate != nil {
		// The headline of a rate search is its maximum sustainable rate,
		// and what limited it is what bound the cell.
		res.Throughput.EventsPerS = s.rate.MSR
		res.Throughput.Bound = s.rate.LimitedBy.Bound()
	}
	res.Notes = append(res.Notes, ns.all()...)
	// Durable effects are a fact of the database, not of what the
	// consumers believe they did.
	res.Counters.Effects = effects
	if ferr := failureError(res.Failures); ferr != nil {
		res.Invariants.Verdict = results.VerdictError
		return ferr
	}
	return nil
}

// consumers chooses, once, how the cell's consumers run.
func (c *cell) consumers(b brokers.Broker, h *handler, ns *notes) consumers {
	n := c.o.Spec.Consumers
	if c.fleet != nil {
		if !b.Capabilities().InProcess {
			return &fleetConsumers{f: c.fleet, c: c, t: h.t, notes: ns}
		}
		// Its queues live in this process: no other process can consume
		// them. The same number of consumers run here instead.
		ns.add(fmt.Sprintf("%s lives in this process: its %d consumers ran as goroutines, not worker processes", c.broker, n))
	}
	return newLocalConsumers(b, c.topic(), c.group(), n, h, ns)
}

// mode names how the cell published (results.Cell.Mode).
func (c *cell) mode() results.Mode {
	switch {
	case c.o.Search != nil:
		return results.ModeRateSearch
	case c.o.Stream.Backlog:
		return results.ModeBacklog
	case c.o.Spec.PublishRate > 0:
		return results.ModeFixedRate
	}
	return results.ModeSaturated
}

// streamed is what streaming a cell's plan produced.
type streamed struct {
	started       bool                   // the consumers started: the stream ran
	plan          *workload.Plan         // what was published: the plan, or less when cut short
	judged        *stepJudge             // a rate search judged its steps one by one instead
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

// stream starts the consumers, publishes the plan with the mid-stream
// actions firing, waits until the stream is done, and stops everything.
// A steady-state cell (steady) publishes its workload's stream until its
// clock ends the window instead.
func (c *cell) stream(ctx context.Context, b brokers.Broker, in *inbox.Inbox, cons consumers, t *tally, ns *notes) streamed {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	f, closeFeed := c.feed()
	defer closeFeed()
	pub := newPublisher(b, c.topic(), f, c.o.Spec, t, ns)
	pub.poison = c.o.Stream.Poison
	stopPub := make(chan struct{})
	pub.stop = stopPub
	steady := c.steady()
	if steady && c.o.Spec.PublishRate == 0 {
		pub.backlog = int64(c.o.Spec.Backlog())
	}
	if c.o.Stream.Backlog {
		// The whole stream waits in the broker before any consumer starts:
		// what follows measures the drain.
		if err := pub.run(runCtx, time.Now()); err != nil {
			return streamed{err: err}
		}
		ns.add(fmt.Sprintf("backlog: %d messages published before the consumers started; events/s is the drain rate", t.c.published.Load()))
	}
	if err := cons.start(runCtx); err != nil {
		return streamed{err: errors.Join(err, cons.stop(ctx))}
	}
	info := CellInfo{Broker: c.broker, Strategy: c.strategy.Name(), Schema: c.id, Consumer: c.consumer, Topic: c.topic(), AppName: AppName(c.id)}
	list, err := c.actions()
	if err != nil {
		return streamed{err: errors.Join(err, cons.stop(ctx))}
	}
	acts := newActions(list, info, c.o.Spec.Faults.ConsumerRestarts, f.total(), f.total()+int64(len(pub.poison)), cons, t, ns)
	w := &waiter{t: t, in: in, st: c.strategy, consumer: c.consumer, stall: max(c.o.Limits.Stall, b.Capabilities().RedeliveryDelay+10*time.Second),
		acts: acts, cons: cons, notes: ns,
		progress: &progressLine{w: c.o.Console.Progress, tty: c.o.Console.TTY, broker: c.broker, strategy: c.strategy.Name(), events: len(c.plan.Events), t: t}}

	cpu0, cpuOK := hostCPU()
	sched0 := readSched()
	s := streamed{started: true, start: time.Now()}
	w.progress.start = s.start
	var clock *steadyClock
	clockCtx, stopClock := context.WithCancel(runCtx)
	defer stopClock()
	if steady {
		clock = &steadyClock{spec: c.o.Spec, t: t, cons: cons, start: s.start, stopPub: sync.OnceFunc(func() { close(stopPub) }), done: make(chan struct{}),
			onWarm: pub.noteLagsFrom, // the publish lag is the window's too
			analyze: func(ctx context.Context) {
				if err := inbox.Analyze(ctx, in.Pool(), c.id); err != nil && ctx.Err() == nil {
					ns.add(fmt.Sprintf("the cell's tables could not be analysed early in the warm-up (%v): until autovacuum does, the planner guesses their statistics", err))
				}
			}}
		t.warmEnd.Store(math.MaxInt64) // nothing is measured until the rate settles
		w.progress.phase = clock.phase
		go clock.run(clockCtx)
	} else {
		stopWarm := t.startWarmup(s.start, c.o.Spec.Warmup.D())
		defer stopWarm()
		cons.warm(ctx, time.Unix(0, t.warmEnd.Load()))
	}
	series := sampleTimeline(runCtx, t, len(acts.list) > 0)
	go acts.watch(runCtx)
	if !c.o.Stream.Backlog {
		s.err = pub.run(runCtx, s.start)
	}
	s.pubEnd = time.Now()
	if clock != nil {
		stopClock()
		<-clock.done
		s.window = clock.result()
	}
	pub.mergeLag(t.meters)
	s.roomWait = time.Duration(pub.roomWait.Load())
	var complete bool
	s.plan, complete = f.published()
	if s.err == nil && !complete && !steady {
		ns.add(fmt.Sprintf("publishing stopped when the workload's duration was up: %d of %d events could take effect, and the checker judges those", len(s.plan.Events), len(c.plan.Events)))
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

// openInbox connects a cell's pool (named for the contention sampler) and
// returns its inbox; with setup it first migrates the schema and prepares
// a user strategy (a worker joins a cell the coordinator set up).
func openInbox(ctx context.Context, o *Options, schema string, st inbox.Strategy, setup bool, ns *notes, opts ...func(*inbox.Options)) (*pgxpool.Pool, *inbox.Inbox, error) {
	pcfg, err := pgxpool.ParseConfig(o.Cfg.PGURL)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres URL: %w", err)
	}
	// One connection per consumer, plus room for storms and draining.
	pcfg.MaxConns = int32(o.Spec.Consumers*2 + o.Spec.Faults.StormConsumers + 4)
	pcfg.ConnConfig.RuntimeParams["application_name"] = AppName(schema)
	iopt := inbox.DefaultOptions()
	iopt.Schema = schema
	iopt.DisableParking = !o.Spec.ParkingOn()
	iopt.BatchSize = o.Spec.BatchSize
	for _, f := range opts {
		f(&iopt)
	}
	inbox.ConfigurePool(pcfg, iopt)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	fail := func(err error) (*pgxpool.Pool, *inbox.Inbox, error) {
		pool.Close()
		return nil, nil, err
	}
	if setup {
		if err := setupSchema(ctx, pool, o, schema, st, ns); err != nil {
			return fail(err)
		}
	}
	in, err := inbox.New(pool, iopt)
	if err != nil {
		return fail(err)
	}
	return pool, in, nil
}

// setupSchema migrates a cell's schema in the run's layout, then runs a
// user strategy file's DDL and has the server check its statements, before
// anything is published.
func setupSchema(ctx context.Context, pool *pgxpool.Pool, o *Options, schema string, st inbox.Strategy, ns *notes) error {
	if _, err := inbox.MigrateLayout(ctx, pool, schema, o.Inbox); err != nil {
		return fmt.Errorf("postgres: migrate schema %s: %w", schema, err)
	}
	if o.Inbox.Partitioned {
		ns.add("inbox partitioned by event time")
	}
	if p, ok := st.(inbox.Preparer); ok {
		return p.Prepare(ctx, pool, schema)
	}
	return nil
}
