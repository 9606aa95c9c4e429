package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
	"github.com/inboxbench/inboxbench/workload"
)

// The worker's side of worker processes (see fleet.go for the protocol).

// WorkerOptions configure one `bench worker` process.
type WorkerOptions struct {
	// Cfg are the endpoints, as the coordinator's (the same PostgreSQL,
	// the brokers reachable from here); RunID names the run to join.
	Cfg   config.Config
	RunID string
	// Consumers is the number of subscriptions this process runs (1: one
	// consumer per process).
	Consumers int
	// JoinTimeout bounds the wait for the run to appear.
	JoinTimeout time.Duration
	// Console takes the worker's progress lines.
	Console Console
}

// Work joins run o.RunID and consumes its cells one after the other until
// the run finishes or ctx ends (SIGTERM: the worker leaves cleanly).
func Work(ctx context.Context, o WorkerOptions) error {
	if o.Consumers <= 0 {
		o.Consumers = 1
	}
	if o.JoinTimeout <= 0 {
		o.JoinTimeout = 2 * time.Minute
	}
	o.Console.quiet()
	ctl, err := pgxpool.New(ctx, o.Cfg.PGURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer ctl.Close()
	if err := ensureControl(ctx, ctl); err != nil {
		return err
	}
	host, _ := os.Hostname()
	w := &worker{base: Options{Cfg: o.Cfg, Console: o.Console}, ctl: ctl, id: fmt.Sprintf("%s-%d", host, os.Getpid()), consumers: o.Consumers}
	deadline := time.Now().Add(o.JoinTimeout)
	done := map[string]bool{}
	for ctx.Err() == nil {
		row, state, silent, err := nextCell(ctx, ctl, o.RunID, done)
		switch {
		case err != nil:
			return err
		case state == "finished":
			return nil
		case state != "" && silent > time.Minute:
			return fmt.Errorf("the coordinator of run %s has been silent for %s: giving up", o.RunID, silent.Round(time.Second))
		case row != nil:
			done[row.id] = true
			fmt.Fprintf(o.Console.Progress, "worker %s: consuming %s through %s with %s\n", w.id, row.id, row.broker, row.strategy)
			if err := w.work(ctx, row); err != nil {
				return fmt.Errorf("cell %s: %w", row.id, err)
			}
			continue
		case state == "" && time.Now().After(deadline):
			return fmt.Errorf("run %q not found in %s after %s: start `bench run --remote-workers N …` first and pass the run id it prints, with the same --pg-url",
				o.RunID, "postgres at "+config.Redact(o.Cfg.PGURL), o.JoinTimeout)
		}
		ctxtime.Sleep(ctx, 200*time.Millisecond)
	}
	return nil
}

// worker is one `bench worker` process's side of a run.
type worker struct {
	// base are the options every cell's start from: the endpoints and
	// the console.
	base      Options
	ctl       *pgxpool.Pool
	id        string
	consumers int // subscriptions per cell
}

// cellRow is a cell as the coordinator opened it to the workers
// (inboxbench_runs.cell); its topic and group derive from its id, as on
// the coordinator's side.
type cellRow struct {
	id, broker, strategy, path, consumer string
	file                                 []byte
	spec                                 workload.Spec
	measure                              bool
	retry                                RetryBound
	externalURL                          string // the external service, for a strategy that calls it
	crashWithBacklog                     int    // Options.Stream.CrashWithBacklog
}

// nextCell finds the run's first open cell this worker has not consumed
// yet; state is the run's state ("" while the run does not exist) and
// silent how long its coordinator has not been heard from.
func nextCell(ctx context.Context, ctl *pgxpool.Pool, runID string, done map[string]bool) (*cellRow, string, time.Duration, error) {
	var state string
	var silentS float64
	err := ctl.QueryRow(ctx, "SELECT state, extract(epoch FROM now() - seen_at)::float8 FROM inboxbench_runs.run WHERE run_id = $1", runID).Scan(&state, &silentS)
	silent := time.Duration(silentS * float64(time.Second))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", 0, nil
	}
	if err != nil {
		return nil, "", 0, fmt.Errorf("postgres: read run %s: %w", runID, err)
	}
	rows, err := ctl.Query(ctx, `SELECT cell_id, broker, strategy, coalesce(strategy_path, ''), strategy_file, consumer, spec, measure,
			retry_attempts, retry_for_ms, coalesce(external_url, ''), crash_with_backlog
		FROM inboxbench_runs.cell WHERE run_id = $1 AND state = 'open' ORDER BY seq`, runID)
	if err != nil {
		return nil, state, silent, err
	}
	defer rows.Close()
	for rows.Next() {
		var r cellRow
		var forMS int64
		if err := rows.Scan(&r.id, &r.broker, &r.strategy, &r.path, &r.file, &r.consumer, &r.spec, &r.measure, &r.retry.Attempts, &forMS, &r.externalURL, &r.crashWithBacklog); err != nil {
			return nil, state, silent, err
		}
		r.retry.For = time.Duration(forMS) * time.Millisecond
		if !done[r.id] {
			return &r, state, silent, nil
		}
	}
	return nil, state, silent, rows.Err()
}

func (r *cellRow) lookup() (inbox.Strategy, error) {
	if r.path == "" {
		return builtinStrategy(r.strategy)
	}
	s, err := inbox.ParseStrategyFile(r.path, r.file)
	if err != nil {
		return nil, err
	}
	if s.Name() != r.strategy && !strings.HasPrefix(r.strategy, "file:") {
		// A labelled file (bench run --strategy-file LABEL=PATH): the
		// content came from the run itself.
		return s.Labelled(r.strategy)
	}
	if s.Name() != r.strategy {
		return nil, fmt.Errorf("strategy file %s parsed as %s, the run has %s", r.path, s.Name(), r.strategy)
	}
	return s, nil
}

// cell is the cell a worker consumes: as the coordinator described it, on
// the worker's options, with a tally of the worker's own (its share of the
// stream is not known ahead).
func (r *cellRow) cell(base Options) (*cell, error) {
	st, err := r.lookup()
	if err != nil {
		return nil, err
	}
	o := base
	o.Spec, o.Measure.Latency = &r.spec, r.measure
	o.Stream.CrashWithBacklog = r.crashWithBacklog
	return &cell{o: &o, broker: r.broker, name: r.strategy, strategy: st, id: r.id, consumer: r.consumer,
		t: newTally(r.measure, r.retry, 0), notes: &notes{}}, nil
}

// work consumes one cell until the coordinator closes it: the same
// handler and consumers as in process, with hooks that report to the
// coordinator.
func (w *worker) work(ctx context.Context, row *cellRow) error {
	c, err := row.cell(w.base)
	if err != nil {
		return err
	}
	m := &member{ctl: w.ctl, id: w.id, cellID: c.id, t: c.t, notes: c.notes}
	var ext func(*inbox.Options)
	if inbox.CallsExternal(c.strategy) {
		if row.externalURL == "" {
			return m.fail(ctx, fmt.Errorf("%s calls an external service and the cell names none", c.strategy.Name()))
		}
		caller := newExtCaller(row.externalURL, c.id, c.o.Spec, c.t)
		defer caller.client.Close()
		caller.setHooks(m)
		ext = caller.options
	}
	if err := c.openInbox(ctx, false, ext); err != nil {
		return m.fail(ctx, err)
	}
	defer c.pool.Close()
	if c.b, err = brokers.Open(ctx, c.broker, c.o.Cfg, nil); err != nil {
		return m.fail(ctx, fmt.Errorf("%s: %w", c.broker, err))
	}
	defer c.b.Close()
	if err := m.flush(ctx, workerWorking, false, ""); err != nil {
		return err
	}
	cons := newLocalConsumers(c, w.consumers, newHandler(c, m))
	_ = cons.start(ctx)
	failed := m.follow(ctx, cons)
	_ = cons.stop(ctx)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if failed != nil {
		return errors.Join(failed, m.flush(fctx, workerFailed, true, failed.Error()))
	}
	return m.flush(fctx, workerLeft, true, "")
}

// member is a worker's side of one cell: the handler's hooks, and its
// reports to the coordinator.
type member struct {
	ctl    *pgxpool.Pool
	id     string
	cellID string
	t      *tally
	notes  *notes
	mu     sync.Mutex // one flush at a time
	// answered holds the message keys answered since the last flush.
	amu     sync.Mutex
	answers []string
	dying   bool
}

// follow reports every quarter second and reads the cell's state until the
// coordinator closes the cell, ctx ends or a consumer fails.
func (m *member) follow(ctx context.Context, cons consumers) error {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-cons.failed():
			return err
		case <-t.C:
		}
		if err := m.flush(ctx, workerWorking, false, ""); err != nil {
			return orNil(ctx, err)
		}
		var state string
		var warm *time.Time
		if err := m.ctl.QueryRow(ctx, "SELECT state, warm_end FROM inboxbench_runs.cell WHERE cell_id = $1", m.cellID).Scan(&state, &warm); err != nil {
			return orNil(ctx, fmt.Errorf("postgres: read cell state: %w", err))
		}
		if warm != nil {
			m.t.warmEnd.Store(warm.UnixNano())
		}
		if state != "open" {
			return nil
		}
	}
}

// orNil drops an error caused by ctx ending (the worker was told to stop).
func orNil(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// answered records a message answered for good, before the driver acks
// it. Once the process is dying, a handler that gets here never returns,
// so its ack is never sent: every ack the broker sees was reported.
func (m *member) answered(key string) {
	m.amu.Lock()
	if m.dying {
		m.amu.Unlock()
		select {}
	}
	m.answers = append(m.answers, key)
	m.amu.Unlock()
}

func (m *member) takeAnswered() []string {
	m.amu.Lock()
	defer m.amu.Unlock()
	k := m.answers
	m.answers = nil
	return k
}

func (m *member) putBack(keys []string) {
	m.amu.Lock()
	m.answers = append(keys, m.answers...)
	m.amu.Unlock()
}

func (m *member) fail(ctx context.Context, err error) error {
	return errors.Join(err, m.flush(ctx, workerFailed, false, err.Error()))
}

// flush writes the worker's report for its cell.
func (m *member) flush(ctx context.Context, state string, final bool, errText string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if keys := m.takeAnswered(); len(keys) > 0 {
		if _, err := m.ctl.Exec(ctx, "INSERT INTO inboxbench_runs.answered (cell_id, keys) VALUES ($1, $2)", m.cellID, keys); err != nil {
			m.putBack(keys)
			return fmt.Errorf("postgres: report answered messages to the coordinator: %w", err)
		}
	}
	rep := workerReport{Counters: m.t.c.snapshot(), Progress: m.t.settled.Load(),
		FirstEffect: m.t.firstEffect.Load(), LastEffect: m.t.lastEffect.Load(), RecentP99: m.t.meters.recentP99(), Error: errText}
	if final {
		rep.Hists = m.t.meters.export()
		rep.Notes = m.notes.all()
	}
	rep.Failures = m.t.policy.Failures()
	rep.DedupMisses, rep.DedupExamples = m.t.decided.report()
	_, err := m.ctl.Exec(ctx, `INSERT INTO inboxbench_runs.worker (cell_id, worker_id, state, report) VALUES ($1, $2, $3, $4)
		ON CONFLICT (cell_id, worker_id) DO UPDATE SET state = EXCLUDED.state, report = EXCLUDED.report, seen_at = now()`,
		m.cellID, m.id, state, rep)
	if err != nil {
		return fmt.Errorf("postgres: report to the coordinator: %w", err)
	}
	return nil
}

// firstCrash claims the crash fault of an event (or one of the cell's
// crashes with a backlog) for the whole cell: the process that takes over
// after the kill must not crash on its redelivery again.
func (m *member) firstCrash(ctx context.Context, key string) bool {
	tag, err := m.ctl.Exec(ctx, "INSERT INTO inboxbench_runs.crash (cell_id, event_key) VALUES ($1, $2) ON CONFLICT DO NOTHING", m.cellID, key)
	return err == nil && tag.RowsAffected() == 1
}

// crash is the crash fault in a worker process: after the commit and
// before the ack (or, with a backlog, before the commit), the process
// reports what it did and kills itself with SIGKILL — no deferred
// function, no broker goodbye, exactly like kill -9.
func (m *member) crash(ctx context.Context) {
	m.amu.Lock()
	m.dying = true
	m.amu.Unlock()
	m.t.c.crashes.Add(1)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := m.flush(fctx, workerCrashed, true, ""); err != nil {
		fmt.Fprintln(os.Stderr, "worker: final report before the crash:", err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
