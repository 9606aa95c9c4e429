// Package runner runs a workload through brokers into the inbox, one cell
// per broker × strategy, measures it, and checks the exactly-once-effect
// invariants against the workload's oracle.
package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// Options of one run.
type Options struct {
	Cfg        config.Config
	Spec       *workload.Spec
	Brokers    []string
	Strategies []string
	// Extra are strategies outside the registry (user strategy files,
	// inbox.LoadStrategyFile); their cells follow Strategies' (userstrategies.go).
	Extra []inbox.Strategy
	// OutDir is the parent of the run directory (results/).
	OutDir string
	RunID  string
	// Measure switches latency histograms on (default); off, the run only
	// counts, to measure what measuring costs.
	Measure bool
	// Audit installs the checker's audit trigger (default on).
	Audit bool
	// Progress receives live progress; TTY selects a redrawn line instead
	// of one line every few seconds.
	Progress io.Writer
	TTY      bool
	// StallTimeout ends a cell that makes no progress for this long; what
	// never arrived is then reported by the checker.
	StallTimeout time.Duration
	Log          *slog.Logger
	// Args is the command line, recorded in the result.
	Args []string
	// Servers maps service name to server version (the CLI asks the
	// stack), recorded in the result's env.
	Servers map[string]string
	// Plan, when set, is used instead of generating one from Spec
	// (scenarios build their own streams).
	Plan *workload.Plan
	// Poison bodies are published among the events (malformed payloads
	// the consumers must dead-letter and count, never ack silently).
	Poison [][]byte
	// NoWrite skips writing result.json (conform keeps its own file).
	NoWrite bool
	// Actions run once during each cell, when the given share of the
	// published messages has been answered (fault injection: restart the
	// broker, kill database connections …).
	Actions []Action
	// Workers, when above zero, runs each cell's consumers as that many
	// `bench worker` processes started with WorkerCmd (and started again
	// when one dies) instead of goroutines; RemoteWorkers more are
	// expected to join from elsewhere (workers.go). Either replaces the
	// workload's consumer count.
	Workers, RemoteWorkers int
	WorkerCmd              []string
	// JoinTimeout bounds the wait for workers to join a cell.
	JoinTimeout time.Duration
	// InboxLayout selects the plain or the time-partitioned inbox.
	InboxLayout inbox.Layout

	fleet *fleet
}

// Action is a mid-stream fault.
type Action struct {
	Name string
	// At is the share of messages answered (0..1) that triggers it.
	At float64
	Do func(ctx context.Context, c CellInfo) error
}

// CellInfo tells an action what it acts on.
type CellInfo struct {
	Broker, Strategy, Schema, Consumer, Topic string
	// AppName is the application_name of the cell's database
	// connections (pg_terminate_backend targets them).
	AppName string
}

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

// quiet discards logs and progress nobody asked for.
func (o *Options) quiet() {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// NewRunID returns a sortable, readable run id.
func NewRunID() string { return time.Now().UTC().Format("20060102-150405") }

// Run executes every cell and writes result.json; the returned run is what
// was written.
func Run(ctx context.Context, o Options) (*results.Run, string, error) {
	if o.RunID == "" {
		o.RunID = NewRunID()
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 30 * time.Second
	}
	o.quiet()
	if err := checkExtras(ctx, o); err != nil {
		return nil, "", err
	}
	if o.Workers > 0 || o.RemoteWorkers > 0 {
		if o.JoinTimeout <= 0 {
			o.JoinTimeout = 2 * time.Minute
		}
		spec := *o.Spec
		spec.Consumers = o.Workers + o.RemoteWorkers
		o.Spec = &spec
		f, err := startFleet(ctx, o)
		if err != nil {
			return nil, "", err
		}
		defer f.finish()
		o.fleet = f
	}
	dir := filepath.Join(o.OutDir, o.RunID)
	wl, err := json.Marshal(o.Spec)
	if err != nil {
		return nil, "", err
	}
	run := &results.Run{SchemaVersion: results.SchemaVersion, RunID: o.RunID, StartedAt: time.Now().UTC(),
		Workload: wl, Env: environment(o)}
	plan := o.Plan
	if plan == nil {
		plan = workload.Generate(o.Spec)
	}
	fmt.Fprintf(o.Progress, "run %s: workload %s, %d events over %d aggregates (%d sends with faults), %d cells\n",
		o.RunID, o.Spec.Name, len(plan.Events), o.Spec.Aggregates, len(plan.Publishes), len(o.Brokers)*len(cellStrategies(o)))
	for _, b := range o.Brokers {
		for _, s := range cellStrategies(o) {
			if ctx.Err() != nil {
				break
			}
			c := runCell(ctx, o, plan, b, s)
			run.Cells = append(run.Cells, c)
			fmt.Fprintf(o.Progress, "%-15s %-26s %s  %s events/s  e2e p99 %s  %s\n", b, s, c.Invariants.Verdict,
				results.FormatRate(c.Throughput.EventsPerS), fmtMicros(c.Latency.E2E.P99), strings.TrimSpace(anomalyLine(c)))
		}
	}
	run.FinishedAt = time.Now().UTC()
	if o.NoWrite {
		return run, "", ctx.Err()
	}
	if _, err := run.Write(dir); err != nil {
		return run, dir, fmt.Errorf("write result: %w", err)
	}
	return run, dir, ctx.Err()
}

func anomalyLine(c results.Cell) string {
	if c.Error != "" {
		return "error: " + c.Error
	}
	var parts []string
	for _, n := range AnomalyNames {
		if v := c.Invariants.Anomalies[n]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", n, v))
		}
	}
	return strings.Join(parts, " ")
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

// cell is the state of one broker × strategy run.
type cell struct {
	o        Options
	plan     *workload.Plan
	broker   string
	id       string
	consumer string
	in       *inbox.Inbox
	strategy inbox.Strategy
	// stall ends a cell without progress: the run's stall timeout, or
	// longer when the broker takes that long to hand a crashed consumer's
	// deliveries to another.
	stall time.Duration
	// ackFirst: the strategy is a consumer-level negative control that
	// acks before its commit (broken-ack-before-commit).
	ackFirst bool
	meters   *meters
	c        counters
	// handled counts distinct messages answered with Ack or Reject
	// (final); done remembers which, so redeliveries are not counted twice.
	handled  atomic.Int64
	done     sync.Map
	progress atomic.Int64 // bumps on every verdict, for stall detection
	start    time.Time    // publishing started
	pubEnd   time.Time    // the last confirm arrived
	cpuBusy  float64      // host CPU busy share over the cell
	warmEnd  atomic.Int64 // unix nanos; a worker learns it from the coordinator
	// crashed remembers events whose crash fault already fired, so a
	// redelivery is not crashed again (Kafka has no redelivered flag).
	crashed sync.Map
	// member is set in a worker process (workers.go); workerProgress and
	// remoteP99 are the coordinator's view of its workers.
	member         *member
	workerProgress int64
	lostWorkers    atomic.Int64
	remoteP99      atomic.Int64
	// ctx, info, fired, acting, notes and actionErr serve the mid-stream
	// actions.
	ctx       context.Context
	actionErr error
	info      CellInfo
	fired     []bool
	acting    atomic.Int32
	noteMu    sync.Mutex
	notes     []string
	// firstEffect/lastEffect bound the throughput window (unix nanos).
	firstEffect, lastEffect atomic.Int64
	effectsAtWarm           atomic.Int64
	series                  []float64
}

func runCell(ctx context.Context, o Options, plan *workload.Plan, broker, strategy string) results.Cell {
	id := cellID(o.RunID, broker, strategy)
	res := results.Cell{Broker: broker, Strategy: strategy, Consumer: "balance-" + id, Schema: id}
	st, err := lookupStrategy(o, strategy)
	if err != nil {
		res.Error = err.Error()
		res.Invariants.Verdict = "ERROR"
		return res
	}
	res.Broken = st.Broken()
	c := &cell{o: o, plan: plan, broker: broker, id: id, consumer: res.Consumer, strategy: st, meters: newMeters(o.Measure)}
	if a, ok := st.(inbox.AckOrdering); ok {
		c.ackFirst = a.AckBeforeCommit()
	}
	if err := c.run(ctx, &res); err != nil {
		res.Error = err.Error()
		if res.Invariants.Verdict == "" {
			res.Invariants.Verdict = "ERROR"
		}
	}
	return res
}

func (c *cell) run(ctx context.Context, res *results.Cell) error {
	o := c.o
	pool, err := c.openInbox(ctx, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	if o.Audit {
		if err := InstallAudit(ctx, pool, c.id); err != nil {
			return err
		}
	}
	b, err := openBroker(ctx, c)
	if err != nil {
		return err
	}
	defer b.Close()
	if o.fleet != nil && b.Capabilities().InProcess {
		// Its queues live in this process: no other process can consume
		// them. The same number of consumers run here instead.
		o.fleet, c.o.fleet = nil, nil
		c.note(fmt.Sprintf("%s lives in this process: its %d consumers ran as goroutines, not worker processes", c.broker, o.Spec.Consumers))
	}
	c.stall = max(o.StallTimeout, b.Capabilities().RedeliveryDelay+10*time.Second)
	topic := strings.ReplaceAll(c.id, "_", "-")
	c.info = CellInfo{Broker: c.broker, Strategy: c.strategy.Name(), Schema: c.id, Consumer: c.consumer, Topic: topic, AppName: AppName(c.id)}
	c.fired = make([]bool, len(o.Actions))
	c.ctx = ctx
	setupCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = b.Setup(setupCtx, topic, o.Spec.Shards)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: set up topic %s: %w", c.broker, topic, err)
	}

	sampler, err := inbox.StartContention(ctx, o.Cfg.PGURL, AppName(c.id), 100*time.Millisecond)
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	consumeErr := make(chan error, o.Spec.Consumers+1)
	restartAt := c.restartSchedule()
	if o.fleet != nil {
		if err := c.enlist(ctx, topic); err != nil {
			_, _ = sampler.Stop(ctx)
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.follow(runCtx, restartAt, consumeErr)
		}()
	} else {
		for i := range o.Spec.Consumers {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if err := c.consume(runCtx, b, topic, i, restartAt); err != nil {
					consumeErr <- err
				}
			}(i)
		}
	}

	cpu0, cpuOK := hostCPU()
	c.start = time.Now()
	c.warmEnd.Store(c.start.Add(o.Spec.Warmup.D()).UnixNano())
	if o.fleet != nil {
		c.setWarm(ctx)
	}
	warm := time.AfterFunc(o.Spec.Warmup.D(), func() { c.effectsAtWarm.Store(c.c.effects.Load()) })
	defer warm.Stop()
	seriesDone := make(chan struct{})
	go c.sampleSeries(runCtx, seriesDone)
	if len(o.Actions) > 0 {
		go c.watchActions(runCtx)
	}
	pubErr := c.publish(runCtx, b, topic)
	c.pubEnd = time.Now()
	var cellErr error
	if pubErr != nil {
		cellErr = pubErr
	} else {
		cellErr = c.waitDone(runCtx, consumeErr)
	}
	if cpu1, ok := hostCPU(); ok && cpuOK {
		c.cpuBusy = cpu1.busySince(cpu0)
	}
	stop()
	wg.Wait()
	<-seriesDone
	if o.fleet != nil {
		if err := c.dismiss(ctx); err != nil {
			cellErr = errors.Join(cellErr, err)
		}
	}
	rep, serr := sampler.Stop(ctx)
	if serr != nil && cellErr == nil {
		o.Log.Warn("contention sampler", "err", serr)
	}

	// Anything still parked gets one last chance to drain (its predecessor
	// may have committed as the consumers stopped); what remains is stuck.
	if _, err := c.in.DrainParked(ctx, c.consumer); err != nil {
		o.Log.Warn("final drain", "err", err)
	}
	inv, effects, err := Check(ctx, pool, c.id, c.consumer, c.plan, o.Audit)
	if err != nil {
		return errors.Join(cellErr, err)
	}
	res.Invariants = inv
	c.fill(res, rep)
	c.noteMu.Lock()
	res.Notes = append(res.Notes, c.notes...)
	cellErr = errors.Join(cellErr, c.actionErr)
	c.noteMu.Unlock()
	// Durable effects are a fact of the database, not of what the
	// consumers believe they did.
	res.Counters.Effects = effects
	return cellErr
}

// openInbox connects the cell's pool (named for the contention sampler)
// and, with setup, migrates the schema (a worker joins a cell the
// coordinator set up); c.in is ready after it.
func (c *cell) openInbox(ctx context.Context, setup bool) (*pgxpool.Pool, error) {
	o := c.o
	pcfg, err := pgxpool.ParseConfig(o.Cfg.PGURL)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	// One connection per consumer, plus room for storms and draining.
	pcfg.MaxConns = int32(o.Spec.Consumers*2 + o.Spec.Faults.StormConsumers + 4)
	pcfg.ConnConfig.RuntimeParams["application_name"] = AppName(c.id)
	iopt := inbox.DefaultOptions()
	iopt.Schema = c.id
	iopt.DisableParking = !o.Spec.ParkingOn()
	iopt.BatchSize = o.Spec.BatchSize
	inbox.ConfigurePool(pcfg, iopt)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if setup {
		if _, err := inbox.MigrateLayout(ctx, pool, c.id, o.InboxLayout); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: migrate schema %s: %w", c.id, err)
		}
		if o.InboxLayout.Partitioned {
			c.note("inbox partitioned by event time")
		}
		// A user strategy file's DDL runs after the built-in migration, and
		// its statements are checked by the server, before anything is
		// published.
		if p, ok := c.strategy.(inbox.Preparer); ok {
			if err := p.Prepare(ctx, pool, c.id); err != nil {
				pool.Close()
				return nil, err
			}
		}
	}
	if c.in, err = inbox.New(pool, iopt); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func openBroker(ctx context.Context, c *cell) (brokers.Broker, error) {
	b, err := brokers.Open(ctx, c.broker, c.o.Cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.broker, err)
	}
	return b, nil
}

// firstCrash says whether an event's crash fault fires now: once per
// event and cell, across processes in worker mode.
func (c *cell) firstCrash(ctx context.Context, key string) bool {
	if c.member != nil {
		return c.member.firstCrash(ctx, key)
	}
	_, done := c.crashed.LoadOrStore(key, true)
	return !done
}

// restartSchedule spreads the planned consumer restarts over the stream:
// restart k fires once that many messages have been handled.
func (c *cell) restartSchedule() []int64 {
	n := c.o.Spec.Faults.ConsumerRestarts
	var at []int64
	for k := 1; k <= n; k++ {
		at = append(at, int64(len(c.plan.Publishes))*int64(k)/int64(n+1))
	}
	return at
}

// consume runs one consumer: it subscribes, and subscribes again after a
// crash fault or a planned restart, until the run ends.
func (c *cell) consume(ctx context.Context, b brokers.Broker, topic string, idx int, restartAt []int64) error {
	group := "ib-" + c.id
	opts := brokers.SubscribeOptions{MaxBatch: c.batchSize()}
	next, first := 0, true
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		sub, err := b.Subscribe(sctx, topic, group, opts, c.handle)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if first {
				return fmt.Errorf("%s: consumer %d: subscribe: %w", c.broker, idx, err)
			}
			// The broker may be restarting: keep trying, as a production
			// consumer would; the stall timeout ends a broker that never
			// comes back, and the error is in the cell's notes.
			c.note(fmt.Sprintf("consumer %d: subscribe again: %v", idx, err))
			if !sleep(ctx, time.Second) {
				return nil
			}
			continue
		}
		first = false
		// Consumer 0 performs the planned restarts.
		var restart <-chan time.Time
		if idx == 0 && next < len(restartAt) {
			restart = tick.C
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				sub.Close()
				return nil
			case <-sub.Done():
				if errors.Is(sub.Err(), brokers.ErrCrashed) {
					c.c.crashes.Add(1)
					break wait
				}
				if ctx.Err() != nil {
					return nil
				}
				// Connection lost (a broker restart, a network fault):
				// unacked deliveries come back; subscribe again.
				c.note(fmt.Sprintf("consumer %d: subscription ended: %v; subscribing again", idx, sub.Err()))
				if !sleep(ctx, 500*time.Millisecond) {
					return nil
				}
				break wait
			case <-restart:
				if next < len(restartAt) && c.handled.Load() >= restartAt[next] {
					next++
					sub.Close()
					break wait
				}
			}
		}
	}
	return nil
}

func (c *cell) batchSize() int {
	if c.strategy.Name() == "batch" || c.strategy.Name() == "pipeline" {
		return c.o.Spec.BatchSize
	}
	return 1
}

// handle is the consumer's handler: decode, apply through the inbox, answer
// the broker only after the database decided.
func (c *cell) handle(ctx context.Context, ds []*brokers.Delivery) []brokers.Verdict {
	received := time.Now()
	verdicts := make([]brokers.Verdict, len(ds))
	byDelivery := make([]*envelope.Event, len(ds)) // nil for poison
	evs := make([]*envelope.Event, 0, len(ds))
	idx := make([]int, 0, len(ds))
	crash := false
	for i, d := range ds {
		c.c.deliveries.Add(1)
		if d.Redelivered || d.DeliveryCount > 1 || d.Attempt > 1 {
			c.c.redeliveries.Add(1)
		}
		ev, err := envelope.Unmarshal(d.Body)
		if err != nil {
			// Poison: dead-lettered by the driver and counted, never
			// silently acked.
			c.c.rejected.Add(1)
			verdicts[i] = brokers.Reject
			continue
		}
		if c.o.Spec.CrashAfterCommit(ev) && c.firstCrash(ctx, ev.Key()) {
			crash = true
		}
		byDelivery[i] = ev
		evs = append(evs, ev)
		idx = append(idx, i)
	}
	if len(evs) > 0 {
		if c.ackFirst && crash {
			// The negative control acks first; the crash then lands
			// between the ack and the commit: the events are gone.
			for _, i := range idx {
				verdicts[i] = brokers.Ack
			}
			c.verdicts(ds, byDelivery, verdicts)
			return verdicts
		}
		c.c.executions.Add(int64(len(evs)))
		release, wait := c.storms(ctx, evs)
		release()
		outs, _ := c.strategy.ApplyBatch(ctx, c.in, c.consumer, evs)
		wait()
		now := time.Now()
		m := c.meters.get(ds[0].Shard)
		for j, out := range outs {
			verdicts[idx[j]] = c.account(m, evs[j], out, received, now)
		}
	}
	if crash {
		if c.member != nil {
			c.member.die(ctx) // a worker process: a real kill -9, no return
		}
		// Committed, then "died" before the ack: nothing of this batch is
		// acknowledged; the broker redelivers it.
		for i := range verdicts {
			verdicts[i] = brokers.Crash
		}
	}
	c.verdicts(ds, byDelivery, verdicts)
	return verdicts
}

// storms prepares StormConsumers-1 extra appliers for each storm-marked
// event, each on its own connection, that race the regular apply once
// released: exactly one of all of them may win the inbox key.
func (c *cell) storms(ctx context.Context, evs []*envelope.Event) (release, wait func()) {
	if c.o.Spec.Faults.ConcurrentDuplicates == 0 {
		return func() {}, func() {} // the common case costs the hot path nothing
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for _, ev := range evs {
		if !c.o.Spec.Storm(ev) {
			continue
		}
		for range c.o.Spec.Faults.StormConsumers - 1 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				c.c.executions.Add(1)
				out, _ := c.in.Apply(ctx, c.strategy, c.consumer, ev)
				c.count(out)
			}()
		}
	}
	return func() { close(gate) }, wg.Wait
}

// verdicts records which messages reached a final verdict. A message is
// identified by its event identity and attempt (a republish is a second
// message of the same event); an undecodable one by its message id.
func (c *cell) verdicts(ds []*brokers.Delivery, evs []*envelope.Event, vs []brokers.Verdict) {
	for i, v := range vs {
		if v != brokers.Ack && v != brokers.Reject {
			continue
		}
		id := "poison " + ds[i].ID
		if evs[i] != nil {
			id = evs[i].Key() + "#" + strconv.Itoa(evs[i].Attempt)
		}
		if _, seen := c.done.LoadOrStore(id, struct{}{}); !seen {
			c.handled.Add(1)
			if c.member != nil {
				c.member.answer(id)
			}
		}
	}
	c.progress.Add(1)
}

// count updates counters for one outcome (and what its commit drained).
func (c *cell) count(out inbox.Outcome) {
	switch out.Result {
	case inbox.Applied:
		c.effect()
	case inbox.Duplicate:
		c.c.duplicates.Add(1)
	case inbox.Gap:
		c.c.gaps.Add(1)
	case inbox.Parked:
		c.c.parked.Add(1)
	case inbox.Stale:
		c.c.stale.Add(1)
	case inbox.Conflict:
		c.c.conflicts.Add(1)
	}
	if out.Attempts > 1 {
		c.c.retries.Add(int64(out.Attempts - 1))
	}
	if out.Err != nil {
		c.c.errors.Add(1)
	}
	for _, d := range out.Drained {
		c.count(d)
	}
}

func (c *cell) effect() {
	c.c.effects.Add(1)
	now := time.Now().UnixNano()
	c.firstEffect.CompareAndSwap(0, now)
	c.lastEffect.Store(now)
}

// account counts an outcome, records its latencies and picks the verdict.
func (c *cell) account(m *meter, ev *envelope.Event, out inbox.Outcome, received, decided time.Time) brokers.Verdict {
	c.count(out)
	// Warm-up excludes what was both sent and decided during it. A
	// backlog built up during warm-up still counts when it commits later:
	// its latency from the intended send time is what an overloaded
	// consumer really costs.
	measured := !ev.IntendedAt.IsZero() && decided.UnixNano() >= c.warmEnd.Load()
	var e2e, dedup time.Duration
	switch out.Result {
	case inbox.Applied:
		if measured {
			e2e = decided.Sub(ev.IntendedAt)
		}
	case inbox.Duplicate:
		dedup = decided.Sub(received)
	}
	if out.Result != inbox.NoResult {
		m.record(out.Result.String(), e2e, out.Duration, dedup, measured)
	}
	switch {
	case out.Err != nil:
		// Nothing committed: the broker redelivers. Never ack an event
		// without a decision.
		return brokers.Retry
	case out.Result == inbox.Gap:
		// Parking is off or full: the predecessor must come first.
		return brokers.Retry
	default:
		// APPLIED, DUPLICATE, PARKED (durably held), STALE and CONFLICT
		// (decided and counted: redelivery cannot change them).
		return brokers.Ack
	}
}

// publish sends the plan, open loop at the spec's rate, from
// Spec.Publishers goroutines. Each owns the ordering keys that hash to it
// and sends them in plan order, so every key's order (and every fault the
// plan placed in it: retries, reorders, republishes) is the plan's, while
// the broker has several batches in flight.
func (c *cell) publish(ctx context.Context, b brokers.Broker, topic string) error {
	pubs := c.plan.Publishes
	n := max(1, min(c.o.Spec.Publishers, len(pubs)))
	own := make([][]int, n)
	for j := range pubs {
		h := fnv.New32a()
		h.Write([]byte(pubs[j].OrderingKey()))
		k := int(h.Sum32() % uint32(n))
		own[k] = append(own[k], j)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.publishPart(ctx, b, topic, own[k], k == 0); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// publishPart sends one publisher's share of the plan (indexes into
// Publishes, in plan order) in batches; an event's intended send time
// comes from its place in the whole plan.
func (c *cell) publishPart(ctx context.Context, b brokers.Broker, topic string, idx []int, first bool) error {
	const batch = 256
	rate := c.o.Spec.PublishRate
	pubs := c.plan.Publishes
	msgs := make([]brokers.Message, 0, batch)
	intendedAt := func(j int) time.Time {
		return c.start.Add(time.Duration(float64(j) / rate * float64(time.Second)))
	}
	for i := 0; i < len(idx); i += batch {
		end := min(i+batch, len(idx))
		intended := time.Now()
		if rate > 0 {
			intended = intendedAt(idx[i])
			if d := time.Until(intended); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
		}
		msgs = msgs[:0]
		for _, j := range idx[i:end] {
			ev := *pubs[j].Event
			ev.IntendedAt = intended
			if rate > 0 {
				ev.IntendedAt = intendedAt(j)
			}
			body, err := c.o.Spec.Encode(&ev)
			if err != nil {
				return fmt.Errorf("encode %s: %w", ev.ID, err)
			}
			msgs = append(msgs, brokers.Message{Key: pubs[j].OrderingKey(), ID: ev.Key(), Body: body})
		}
		if err := c.send(ctx, b, topic, msgs); err != nil {
			return err
		}
		c.c.published.Add(int64(len(msgs)))
		if i == 0 && first && len(c.o.Poison) > 0 {
			if err := c.publishPoison(ctx, b, topic); err != nil {
				return err
			}
		}
		if c.o.Spec.Duration > 0 && time.Since(c.start) > c.o.Spec.Duration.D() {
			break
		}
	}
	return nil
}

// send publishes one batch and waits for its confirmations. A failed batch
// is sent again, whole, with the same event ids (a producer's retry: what
// was confirmed before arrives twice and is deduplicated), for up to two
// minutes: a broker restart must not end the run, a dead broker must.
func (c *cell) send(ctx context.Context, b brokers.Broker, topic string, msgs []brokers.Message) error {
	deadline := time.Now().Add(2 * time.Minute)
	backoff := 200 * time.Millisecond
	for {
		sent := time.Now()
		errs := b.Publish(ctx, topic, msgs)
		err := brokers.FirstError(errs)
		if err == nil {
			c.meters.recordPublish(time.Since(sent), len(msgs))
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s: publish to %s: %w", c.broker, topic, err)
		}
		c.c.publishRetries.Add(1)
		c.note(fmt.Sprintf("publish to %s failed, sending the batch again: %v", topic, err))
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// note records something that happened to the cell, once per text.
func (c *cell) note(text string) {
	c.noteMu.Lock()
	defer c.noteMu.Unlock()
	for _, n := range c.notes {
		if n == text {
			return
		}
	}
	if len(c.notes) < 50 {
		c.notes = append(c.notes, text)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// publishPoison sends the malformed bodies after the first batch, so they
// sit in the middle of the stream.
func (c *cell) publishPoison(ctx context.Context, b brokers.Broker, topic string) error {
	msgs := make([]brokers.Message, len(c.o.Poison))
	for i, body := range c.o.Poison {
		msgs[i] = brokers.Message{Key: fmt.Sprintf("poison-%d", i), ID: fmt.Sprintf("poison-%d", i), Body: body}
	}
	if err := c.send(ctx, b, topic, msgs); err != nil {
		return err
	}
	c.c.published.Add(int64(len(msgs)))
	return nil
}

// runActions fires each mid-stream action once its share of the stream
// has been answered. Stall detection pauses while one runs, and the cell
// is not done before every action finished. An action runs on a context
// of its own: ending the cell must not cut a broker restart in half.
func (c *cell) watchActions(ctx context.Context) {
	total := int64(len(c.plan.Publishes) + len(c.o.Poison))
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !c.allFired() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.runActions(total)
		}
	}
}

// runActions fires the next due action, one at a time: two faults
// injected in the same instant would hide each other.
func (c *cell) runActions(total int64) {
	if c.acting.Load() > 0 {
		return
	}
	for i := range c.o.Actions {
		a := &c.o.Actions[i]
		handled := c.handled.Load()
		if c.isFired(i) {
			continue
		}
		if float64(handled) < a.At*float64(total) {
			return
		}
		c.fire(i)
		c.acting.Add(1)
		go func() {
			defer c.acting.Add(-1)
			defer c.progress.Add(1)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 5*time.Minute)
			defer cancel()
			err := a.Do(ctx, c.info)
			c.noteMu.Lock()
			defer c.noteMu.Unlock()
			if err != nil {
				c.notes = append(c.notes, fmt.Sprintf("action %s: %v", a.Name, err))
				c.actionErr = errors.Join(c.actionErr, fmt.Errorf("action %s: %w", a.Name, err))
				return
			}
			c.notes = append(c.notes, fmt.Sprintf("action %s done with %d of %d messages answered", a.Name, handled, total))
		}()
		return
	}
}

func (c *cell) fire(i int) {
	c.noteMu.Lock()
	c.fired[i] = true
	c.noteMu.Unlock()
}

func (c *cell) isFired(i int) bool {
	c.noteMu.Lock()
	defer c.noteMu.Unlock()
	return c.fired[i]
}

func (c *cell) allFired() bool {
	c.noteMu.Lock()
	defer c.noteMu.Unlock()
	for _, f := range c.fired {
		if !f {
			return false
		}
	}
	return true
}

// waitDone returns once every published message got a final verdict and
// nothing is parked, or when the cell stalls.
func (c *cell) waitDone(ctx context.Context, consumeErr <-chan error) error {
	last, lastChange := c.progress.Load(), time.Now()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	report, lastSweep, emptySweeps := time.Now(), time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-consumeErr:
			return err
		case <-t.C:
		}
		if p := c.progress.Load(); p != last {
			last, lastChange = p, time.Now()
		}
		if c.acting.Load() > 0 {
			lastChange = time.Now()
		}
		if c.handled.Load() >= c.c.published.Load() && c.acting.Load() == 0 && c.allFired() {
			n, err := c.parkedNow(ctx)
			if err == nil && n == 0 {
				return nil
			}
			// Everything was delivered but some events are still parked:
			// their predecessor committed while their drain check ran (the
			// one-statement strategies drain after their commit). A
			// consumer sweeps for them, as a production one would.
			if err == nil && time.Since(lastSweep) > time.Second {
				lastSweep = time.Now()
				outs, _ := c.in.DrainParked(ctx, c.consumer)
				for _, o := range outs {
					c.count(o)
				}
				if len(outs) > 0 {
					c.progress.Add(1)
					emptySweeps = 0
				} else if emptySweeps++; emptySweeps >= 3 {
					// Every message has its final answer and nothing
					// parked can move: its predecessor will never come.
					// The checker reports what stays parked.
					return nil
				}
			}
		}
		if time.Since(lastChange) > c.stall && c.lostWorkers.Load() > 0 && c.acting.Load() == 0 && c.allFired() {
			// A worker was killed from outside before it could report the
			// messages it had answered last, so the count cannot reach the
			// total. Nothing moved for the whole stall timeout (longer
			// than the broker takes to hand a dead consumer's work on) and
			// nothing is parked: the stream is done, and the checker
			// judges the database.
			if n, err := c.parkedNow(ctx); err == nil && n == 0 {
				c.note(fmt.Sprintf("%d worker(s) vanished without a final report; the cell ended after %s without deliveries with %d of %d answers counted",
					c.lostWorkers.Load(), c.stall, c.handled.Load(), c.c.published.Load()))
				return nil
			}
		}
		if time.Since(lastChange) > c.stall {
			return fmt.Errorf("stalled: no delivery for %s with %d of %d messages answered (the checker lists what is missing)",
				c.stall, c.handled.Load(), c.c.published.Load())
		}
		if every := c.progressEvery(); time.Since(report) >= every {
			report = time.Now()
			c.printProgress()
		}
	}
}

func (c *cell) parkedNow(ctx context.Context) (int64, error) {
	var n int64
	err := c.in.Pool().QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{c.id}.Sanitize()+".parked WHERE consumer = $1", c.consumer).Scan(&n)
	return n, err
}

func (c *cell) progressEvery() time.Duration {
	if c.o.TTY {
		return time.Second
	}
	return 5 * time.Second
}

func (c *cell) printProgress() {
	s := c.c.snapshot()
	el := time.Since(c.start).Seconds()
	rate := float64(s.Effects) / max(el, 0.001)
	left := "?"
	if rate > 0 {
		remaining := float64(int64(len(c.plan.Events)) - s.Effects)
		left = (time.Duration(max(remaining, 0)/rate) * time.Second).Round(time.Second).String()
	}
	line := fmt.Sprintf("%s/%s: %d/%d effects, %.0f/s, backlog %d, dedup hits %d, e2e p99 %s, ~%s left",
		c.broker, c.strategy.Name(), s.Effects, len(c.plan.Events), rate, s.Published-c.handled.Load(),
		s.Duplicates, fmtMicros(max(c.meters.recentP99(), c.remoteP99.Load())), left)
	if c.o.TTY {
		fmt.Fprintf(c.o.Progress, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(c.o.Progress, line)
	}
}

// sampleSeries records effects per second.
func (c *cell) sampleSeries(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prev int64
	for {
		select {
		case <-ctx.Done():
			if c.o.TTY {
				fmt.Fprint(c.o.Progress, "\r\033[K")
			}
			return
		case <-t.C:
			n := c.c.effects.Load()
			c.series = append(c.series, float64(n-prev))
			prev = n
		}
	}
}

// fill copies measurements into the result cell.
func (c *cell) fill(res *results.Cell, rep inbox.ContentionReport) {
	res.Counters = c.c.snapshot()
	res.Latency = c.meters.latencies()
	first, last := c.firstEffect.Load(), c.lastEffect.Load()
	// Throughput: effects after warm-up over the time from the later of
	// the first effect and the end of warm-up to the last effect.
	if last > first {
		from, effects := first, res.Counters.Effects
		if w := c.warmEnd.Load(); w > first {
			from, effects = w, effects-c.effectsAtWarm.Load()
		}
		if last > from {
			res.Throughput.EventsPerS = float64(effects) / time.Duration(last-from).Seconds()
		} else {
			// Everything took effect within the warm-up: report the whole
			// window rather than nothing, and say so.
			res.Throughput.EventsPerS = float64(res.Counters.Effects) / time.Duration(last-first).Seconds()
			res.Notes = append(res.Notes, "the stream finished within the warm-up: events/s covers the whole run")
		}
		res.DurationS = time.Duration(last - first).Seconds()
	}
	res.Throughput.Series = c.series
	res.Throughput.HostCPUBusy = c.cpuBusy
	c.bound(res)
	res.Contention = results.Contention{Samples: rep.Samples, LockWaitSamples: rep.LockWaits, LockWaitShare: rep.LockWaitShare(),
		BlockedMax: rep.BlockedMax, Deadlocks: rep.Deadlocks, Rollbacks: rep.Rollbacks, Commits: rep.Commits}
	for _, s := range rep.Top {
		res.Contention.TopStatements = append(res.Contention.TopStatements, results.Statement{Query: s.Query, Calls: s.Calls, MeanMs: s.MeanMs, TotalMs: s.TotalMs})
	}
	for _, p := range rep.Series {
		res.Contention.Series = append(res.Contention.Series, results.WaitPoint{AtS: p.At.Seconds(), Waiting: p.LockWaits, Blocked: p.Blocked})
	}
}

// bound says what limited the cell: did the consumers keep up with the
// publisher (the last effect soon after the last confirm) or not?
func (c *cell) bound(res *results.Cell) {
	if c.pubEnd.IsZero() || c.lastEffect.Load() == 0 {
		return
	}
	pub := c.pubEnd.Sub(c.start)
	if pub > 0 {
		res.Throughput.PublishedPerS = float64(c.c.published.Load()) / pub.Seconds()
	}
	lag := time.Unix(0, c.lastEffect.Load()).Sub(c.pubEnd)
	switch {
	case lag > max(time.Second, pub/10):
		res.Throughput.Bound = "consume"
	case c.o.Spec.PublishRate > 0:
		res.Throughput.Bound = "rate"
	default:
		res.Throughput.Bound = "publish"
	}
}

func fmtMicros(us int64) string {
	if us == 0 {
		return "-"
	}
	return results.FormatMicros(us)
}

// environment records where the figures come from.
func environment(o Options) results.Env {
	e := results.Env{GoVersion: runtime.Version(), Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Brokers: map[string]string{}, Clients: clientVersions(), Measure: o.Measure, CommandArg: o.Args, GitCommit: gitCommit()}
	for name, v := range o.Servers {
		if name == "postgres" {
			e.Postgres = v
		} else {
			e.Brokers[name] = v
		}
	}
	e.Hostname, _ = os.Hostname()
	e.MemoryMiB = memoryMiB()
	return e
}
