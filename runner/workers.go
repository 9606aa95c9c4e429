package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// Worker processes. With Options.Workers or Options.RemoteWorkers, a cell's
// consumers are `bench worker` processes instead of goroutines: a crash
// fault is then a real kill -9 of a real process, and a run can spread its
// consumers over several machines. There is no cluster protocol of our
// own: the brokers' consumer groups (Kafka groups, RabbitMQ single-active
// consumers, RocketMQ orderly groups) share the partitions and queues
// among whatever processes subscribe, and PostgreSQL — which every worker
// reaches anyway — holds the run's state in the inboxbench_runs schema:
//
//   - run: one row per run, with the coordinator's heartbeat;
//   - cell: the cell being consumed (broker, strategy, schema, consumer,
//     topic, resolved workload), open → closing → closed;
//   - worker: one row per worker process and cell, with its counters every
//     quarter second and its histograms when it leaves (or dies on purpose);
//   - answered: the messages each worker answered for good (ack or
//     reject) since its previous report; the coordinator counts them once
//     each, as a message acked by a worker that then died can be delivered
//     and answered again by the next one;
//   - crash: the events whose crash fault already fired, so the process
//     that takes over does not crash on the redelivery again.
//
// The coordinator (bench run) publishes, sums the workers' reports into
// the cell's counters, decides when the cell is done, and runs the same
// checker against the database as for in-process consumers.

const controlDDL = `
CREATE SCHEMA IF NOT EXISTS inboxbench_runs;
CREATE TABLE IF NOT EXISTS inboxbench_runs.run (
    run_id     text PRIMARY KEY,
    state      text NOT NULL,
    seen_at    timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS inboxbench_runs.cell (
    cell_id       text PRIMARY KEY,
    run_id        text NOT NULL REFERENCES inboxbench_runs.run ON DELETE CASCADE,
    seq           int NOT NULL,
    broker        text NOT NULL,
    strategy      text NOT NULL,
    strategy_path text,
    strategy_file bytea,
    consumer      text NOT NULL,
    topic         text NOT NULL,
    spec          jsonb NOT NULL,
    measure       boolean NOT NULL,
    state         text NOT NULL,
    warm_end      timestamptz
);
CREATE TABLE IF NOT EXISTS inboxbench_runs.worker (
    cell_id   text NOT NULL REFERENCES inboxbench_runs.cell ON DELETE CASCADE,
    worker_id text NOT NULL,
    state     text NOT NULL,
    seen_at   timestamptz NOT NULL DEFAULT now(),
    report    jsonb,
    PRIMARY KEY (cell_id, worker_id)
);
CREATE TABLE IF NOT EXISTS inboxbench_runs.answered (
    cell_id   text NOT NULL REFERENCES inboxbench_runs.cell ON DELETE CASCADE,
    keys      text[] NOT NULL
);
CREATE TABLE IF NOT EXISTS inboxbench_runs.crash (
    cell_id   text NOT NULL REFERENCES inboxbench_runs.cell ON DELETE CASCADE,
    event_key text NOT NULL,
    PRIMARY KEY (cell_id, event_key)
);`

// Worker states in inboxbench_runs.worker.
const (
	workerWorking = "working"
	workerLeft    = "left"    // left the cell and sent its final report
	workerCrashed = "crashed" // killed itself on a crash fault, report sent
	workerFailed  = "failed"  // gave up on the cell; report has the error
)

// flushEvery is how often a worker reports; the coordinator reads as often.
const flushEvery = 250 * time.Millisecond

// ensureControl creates the control schema once; concurrent first runs
// and workers serialize on an advisory lock (CREATE … IF NOT EXISTS alone
// still races on the catalog).
func ensureControl(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('inboxbench_runs'))"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, controlDDL)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: create the run control schema inboxbench_runs: %w", err)
	}
	return nil
}

// workerReport is what a worker tells the coordinator about one cell.
type workerReport struct {
	Counters    results.Counters `json:"counters"`
	Progress    int64            `json:"progress"`
	FirstEffect int64            `json:"first_effect,omitempty"`
	LastEffect  int64            `json:"last_effect,omitempty"`
	RecentP99   int64            `json:"recent_p99,omitempty"`
	// Hists are the worker's merged histograms, HdrHistogram V2 compressed
	// and base64 encoded, in the final report only.
	Hists map[string]string `json:"hists,omitempty"`
	Notes []string          `json:"notes,omitempty"`
	Error string            `json:"error,omitempty"`
}

// ---- coordinator side ----

// fleet is the coordinator's view of the run's workers: the local
// processes it keeps alive, and the control rows every worker reads.
type fleet struct {
	ctl    *pgxpool.Pool
	runID  string
	want   int // workers a cell waits for before publishing
	log    func(string)
	slots  []*slot
	errs   chan error
	stopHB context.CancelFunc
	hbDone chan struct{}
	seq    int
}

// slot is one local worker process, started again when it dies.
type slot struct {
	mu      sync.Mutex
	proc    *os.Process
	planned bool // the coordinator stopped it on purpose (planned restart)
	crashes int  // times it died of SIGKILL and was replaced
}

func startFleet(ctx context.Context, o Options) (*fleet, error) {
	ctl, err := pgxpool.New(ctx, o.Cfg.PGURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	f := &fleet{ctl: ctl, runID: o.RunID, want: o.Workers + o.RemoteWorkers, errs: make(chan error, o.Workers+1),
		log: func(s string) { fmt.Fprintln(o.Progress, s) }, hbDone: make(chan struct{})}
	if err := ensureControl(ctx, ctl); err != nil {
		ctl.Close()
		return nil, err
	}
	// Control rows are only needed while a run lasts; a day later they are
	// clutter (the results live in result.json).
	if _, err := ctl.Exec(ctx, "DELETE FROM inboxbench_runs.run WHERE created_at < now() - interval '1 day'"); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("postgres: clean up old runs: %w", err)
	}
	if _, err := ctl.Exec(ctx, "INSERT INTO inboxbench_runs.run (run_id, state) VALUES ($1, 'running')", o.RunID); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("postgres: register run %s (a run id can be used once): %w", o.RunID, err)
	}
	hbCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stopHB = stop
	go f.heartbeat(hbCtx)
	if o.RemoteWorkers > 0 {
		f.log(fmt.Sprintf("run %s waits for %d remote worker(s): start each with `bench worker --run-id %s` (same --pg-url and broker settings)",
			o.RunID, o.RemoteWorkers, o.RunID))
	}
	if o.Workers > 0 && len(o.WorkerCmd) == 0 {
		f.finish()
		return nil, errors.New("runner: Options.Workers needs Options.WorkerCmd, the command that starts `bench worker`")
	}
	for i := range o.Workers {
		s := &slot{}
		f.slots = append(f.slots, s)
		go f.keep(ctx, o, i, s)
	}
	return f, nil
}

// heartbeat tells workers the coordinator is alive: a worker whose
// coordinator went silent gives up instead of waiting forever.
func (f *fleet) heartbeat(ctx context.Context) {
	defer close(f.hbDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = f.ctl.Exec(ctx, "UPDATE inboxbench_runs.run SET seen_at = now() WHERE run_id = $1", f.runID)
		}
	}
}

// keep runs local worker i, and starts it again after it died: a kill -9
// (the crash fault, or anyone's) or a planned restart. A worker that
// keeps failing for another reason ends the cell with its error output.
func (f *fleet) keep(ctx context.Context, o Options, i int, s *slot) {
	fails := 0
	for ctx.Err() == nil {
		args := append(append([]string(nil), o.WorkerCmd[1:]...), "--run-id", f.runID)
		cmd := exec.Command(o.WorkerCmd[0], args...)
		cmd.Env = append(os.Environ(), o.Cfg.Environ()...)
		var out tail
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			f.errs <- fmt.Errorf("start worker %d (%s): %w", i, strings.Join(o.WorkerCmd, " "), err)
			return
		}
		s.mu.Lock()
		s.proc = cmd.Process
		s.mu.Unlock()
		err := cmd.Wait()
		s.mu.Lock()
		s.proc = nil
		planned := s.planned
		s.planned = false
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if killed && !planned {
			s.crashes++
		}
		s.mu.Unlock()
		switch {
		case ctx.Err() != nil, f.finished():
			return
		case planned, killed:
			continue
		case err == nil:
			continue // left early (its cell closed under it): join the next one
		}
		if fails++; fails >= 3 {
			f.errs <- fmt.Errorf("worker %d failed %d times, last: %v: %s", i, fails, err, strings.TrimSpace(out.String()))
			return
		}
		f.log(fmt.Sprintf("worker %d exited (%v), starting it again: %s", i, err, strings.TrimSpace(out.String())))
		sleep(ctx, time.Second)
	}
}

func (f *fleet) finished() bool {
	select {
	case <-f.hbDone:
		return true
	default:
		return false
	}
}

// restart stops local worker i gracefully (SIGTERM: it leaves the group
// and reports); keep starts a new one.
func (f *fleet) restart(i int) bool {
	if len(f.slots) == 0 {
		return false
	}
	s := f.slots[i%len(f.slots)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	s.planned = true
	_ = s.proc.Signal(syscall.SIGTERM)
	return true
}

func (f *fleet) crashRestarts() int {
	n := 0
	for _, s := range f.slots {
		s.mu.Lock()
		n += s.crashes
		s.mu.Unlock()
	}
	return n
}

// finish marks the run finished (workers exit), waits a little for the
// local ones and kills what is left.
func (f *fleet) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, _ = f.ctl.Exec(ctx, "UPDATE inboxbench_runs.run SET state = 'finished' WHERE run_id = $1", f.runID)
	f.stopHB()
	<-f.hbDone
	for ctx.Err() == nil {
		alive := 0
		for _, s := range f.slots {
			s.mu.Lock()
			if s.proc != nil {
				alive++
			}
			s.mu.Unlock()
		}
		if alive == 0 {
			break
		}
		sleep(ctx, 100*time.Millisecond)
	}
	for _, s := range f.slots {
		s.mu.Lock()
		if s.proc != nil {
			_ = s.proc.Kill()
		}
		s.mu.Unlock()
	}
	f.ctl.Close()
}

// tail keeps the last 4 KiB a worker printed, for error messages.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.b, nil))
}

// enlist opens the cell to the workers and waits until enough of them
// have joined: publishing earlier would measure the first worker alone.
func (c *cell) enlist(ctx context.Context, topic string) error {
	f := c.o.fleet
	spec, err := json.Marshal(c.o.Spec)
	if err != nil {
		return err
	}
	var path string
	var file []byte
	if p, ok := c.strategy.(interface{ Path() string }); ok {
		path = p.Path()
		if file, err = os.ReadFile(path); err != nil {
			return fmt.Errorf("strategy file for the workers: %w", err)
		}
	}
	f.seq++
	_, err = f.ctl.Exec(ctx, `INSERT INTO inboxbench_runs.cell
		(cell_id, run_id, seq, broker, strategy, strategy_path, strategy_file, consumer, topic, spec, measure, state)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'open')`,
		c.id, f.runID, f.seq, c.broker, c.strategy.Name(), path, file, c.consumer, topic, spec, c.o.Measure)
	if err != nil {
		return fmt.Errorf("postgres: open cell %s to the workers: %w", c.id, err)
	}
	deadline := time.Now().Add(c.o.JoinTimeout)
	for {
		n, err := c.working(ctx)
		if err != nil {
			return err
		}
		if n >= f.want {
			return nil
		}
		select {
		case err := <-f.errs:
			return err
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d workers joined cell %s within %s: start them with `bench worker --run-id %s` (same --pg-url and broker settings) or lower --remote-workers",
				n, f.want, c.id, c.o.JoinTimeout, f.runID)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// working counts the workers consuming the cell now.
func (c *cell) working(ctx context.Context) (int, error) {
	var n int
	err := c.o.fleet.ctl.QueryRow(ctx, "SELECT count(*) FROM inboxbench_runs.worker WHERE cell_id = $1 AND state = $2",
		c.id, workerWorking).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: count workers: %w", err)
	}
	return n, nil
}

// follow keeps the cell's counters current from the workers' reports and
// performs the planned consumer restarts, until ctx ends.
func (c *cell) follow(ctx context.Context, restartAt []int64, errs chan<- error) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-c.o.fleet.errs:
			errs <- err
			return
		case <-t.C:
		}
		if err := c.gather(ctx, false); err != nil && ctx.Err() == nil {
			c.note("reading worker reports: " + err.Error())
		}
		if next < len(restartAt) && c.handled.Load() >= restartAt[next] {
			if c.o.fleet.restart(next) {
				c.note(fmt.Sprintf("planned restart %d: worker process %d stopped and started again", next+1, next%len(c.o.fleet.slots)))
			} else if len(c.o.fleet.slots) == 0 {
				c.note("planned consumer restarts need local worker processes (--workers); remote workers were not restarted")
			}
			next++
		}
	}
}

// gather sums the workers' latest reports into the cell. Final also merges
// their histograms and notes.
func (c *cell) gather(ctx context.Context, final bool) error {
	if err := c.readAnswered(ctx); err != nil {
		return err
	}
	rows, err := c.o.fleet.ctl.Query(ctx, `SELECT worker_id, state, report, extract(epoch FROM now() - seen_at)::float8
		FROM inboxbench_runs.worker WHERE cell_id = $1 ORDER BY worker_id`, c.id)
	if err != nil {
		return err
	}
	defer rows.Close()
	type row struct {
		id, state string
		rep       *workerReport
		silentS   float64
	}
	var all []row
	lost := int64(0)
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.state, &r.rep, &r.silentS); err != nil {
			return err
		}
		all = append(all, r)
		// Silent for many report intervals without a final report: killed
		// from outside (or its machine is gone). What it answered since
		// its last report is lost with it.
		if r.state == workerWorking && r.silentS > 3 {
			lost++
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var sum results.Counters
	var progress, first, last, p99 int64
	for _, r := range all {
		if r.rep == nil {
			continue
		}
		sum = addCounters(sum, r.rep.Counters)
		progress += r.rep.Progress
		if f := r.rep.FirstEffect; f > 0 && (first == 0 || f < first) {
			first = f
		}
		last = max(last, r.rep.LastEffect)
		p99 = max(p99, r.rep.RecentP99)
		if !final {
			continue
		}
		for _, n := range r.rep.Notes {
			c.note("worker " + r.id + ": " + n)
		}
		switch r.state {
		case workerFailed:
			c.note(fmt.Sprintf("worker %s failed: %s", r.id, r.rep.Error))
		case workerWorking:
			c.note(fmt.Sprintf("worker %s never sent its final report (killed from outside?): its latencies are missing, and so may be its counts of the last quarter second", r.id))
		}
		if err := c.meters.absorb(r.id, r.rep.Hists); err != nil {
			c.note(fmt.Sprintf("worker %s: histograms unreadable: %v", r.id, err))
		}
	}
	c.c.setConsumerSide(sum)
	c.lostWorkers.Store(lost)
	if progress != c.workerProgress {
		c.workerProgress = progress
		c.progress.Add(1)
	}
	c.firstEffect.Store(first)
	c.lastEffect.Store(last)
	c.remoteP99.Store(p99)
	if final {
		c.note(fmt.Sprintf("consumed by %d worker process(es) over the cell", len(all)))
	}
	return nil
}

// setWarm tells the workers when the warm-up ends (their clocks must agree
// with the coordinator's, as for end-to-end latency: run NTP).
func (c *cell) setWarm(ctx context.Context) {
	_, err := c.o.fleet.ctl.Exec(ctx, "UPDATE inboxbench_runs.cell SET warm_end = $2 WHERE cell_id = $1", c.id, time.Unix(0, c.warmEnd.Load()))
	if err != nil {
		c.note("could not tell the workers the end of the warm-up: " + err.Error())
	}
}

// dismiss closes the cell: the workers stop consuming and send their final
// reports, which are merged.
func (c *cell) dismiss(ctx context.Context) error {
	f := c.o.fleet
	if _, err := f.ctl.Exec(ctx, "UPDATE inboxbench_runs.cell SET state = 'closing' WHERE cell_id = $1", c.id); err != nil {
		return fmt.Errorf("postgres: close cell %s: %w", c.id, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := c.working(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if !sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	err := c.gather(ctx, true)
	if n := f.crashRestarts(); n > 0 {
		c.note(fmt.Sprintf("%d worker process(es) killed with SIGKILL so far in this run and replaced", n))
	}
	_, cerr := f.ctl.Exec(ctx, "UPDATE inboxbench_runs.cell SET state = 'closed' WHERE cell_id = $1", c.id)
	return errors.Join(err, cerr)
}

// ---- worker side ----

// WorkerOptions configure one `bench worker` process.
type WorkerOptions struct {
	Cfg      config.Config
	RunID    string
	Log      *slog.Logger
	Progress io.Writer
	// Consumers is the number of subscriptions this process runs (1: one
	// consumer per process).
	Consumers int
	// JoinTimeout bounds the wait for the run to appear.
	JoinTimeout time.Duration
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
	base := Options{Cfg: o.Cfg, Log: o.Log, Progress: o.Progress}
	base.quiet()
	ctl, err := pgxpool.New(ctx, base.Cfg.PGURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer ctl.Close()
	if err := ensureControl(ctx, ctl); err != nil {
		return err
	}
	host, _ := os.Hostname()
	wid := fmt.Sprintf("%s-%d", host, os.Getpid())
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
			fmt.Fprintf(base.Progress, "worker %s: consuming %s through %s with %s\n", wid, row.id, row.broker, row.strategy)
			if err := workCell(ctx, base, ctl, wid, row, o.Consumers); err != nil {
				return fmt.Errorf("cell %s: %w", row.id, err)
			}
			continue
		case state == "" && time.Now().After(deadline):
			return fmt.Errorf("run %q not found in %s after %s: start `bench run --remote-workers N …` first and pass the run id it prints, with the same --pg-url",
				o.RunID, "postgres at "+config.Redact(base.Cfg.PGURL), o.JoinTimeout)
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return nil
}

type cellRow struct {
	id, broker, strategy, path, consumer, topic string
	file                                        []byte
	spec                                        workload.Spec
	measure                                     bool
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
	rows, err := ctl.Query(ctx, `SELECT cell_id, broker, strategy, coalesce(strategy_path, ''), strategy_file, consumer, topic, spec, measure
		FROM inboxbench_runs.cell WHERE run_id = $1 AND state = 'open' ORDER BY seq`, runID)
	if err != nil {
		return nil, state, silent, err
	}
	defer rows.Close()
	for rows.Next() {
		var r cellRow
		if err := rows.Scan(&r.id, &r.broker, &r.strategy, &r.path, &r.file, &r.consumer, &r.topic, &r.spec, &r.measure); err != nil {
			return nil, state, silent, err
		}
		if !done[r.id] {
			return &r, state, silent, nil
		}
	}
	return nil, state, silent, rows.Err()
}

func (r *cellRow) lookup() (inbox.Strategy, error) {
	if r.path == "" {
		return inbox.Lookup(r.strategy)
	}
	s, err := inbox.ParseStrategyFile(r.path, r.file)
	if err != nil {
		return nil, err
	}
	if s.Name() != r.strategy {
		return nil, fmt.Errorf("strategy file %s parsed as %s, the run has %s", r.path, s.Name(), r.strategy)
	}
	return s, nil
}

// member is a worker's side of one cell.
type member struct {
	ctl  *pgxpool.Pool
	id   string
	cell *cell
	mu   sync.Mutex // one flush at a time
	// answered holds the message keys answered since the last flush.
	amu      sync.Mutex
	answered []string
	dying    bool
}

// answer records a message answered for good, before the driver acks it.
// Once the process is dying, a handler that gets here never returns, so
// its ack is never sent: every ack the broker sees was reported.
func (m *member) answer(key string) {
	m.amu.Lock()
	if m.dying {
		m.amu.Unlock()
		select {}
	}
	m.answered = append(m.answered, key)
	m.amu.Unlock()
}

func (m *member) takeAnswered() []string {
	m.amu.Lock()
	defer m.amu.Unlock()
	k := m.answered
	m.answered = nil
	return k
}

func (m *member) putBack(keys []string) {
	m.amu.Lock()
	m.answered = append(keys, m.answered...)
	m.amu.Unlock()
}

// readAnswered counts the messages the workers answered since the last
// read, each once however many workers answered it. Rows are consumed
// (deleted) as they are read: identity values of concurrent inserts do
// not become visible in order, so "greater than the last id" would skip.
func (c *cell) readAnswered(ctx context.Context) error {
	rows, err := c.o.fleet.ctl.Query(ctx, "DELETE FROM inboxbench_runs.answered WHERE cell_id = $1 RETURNING keys", c.id)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var keys []string
		if err := rows.Scan(&keys); err != nil {
			return err
		}
		for _, k := range keys {
			if _, seen := c.done.LoadOrStore(k, struct{}{}); !seen {
				c.handled.Add(1)
			}
		}
	}
	return rows.Err()
}

// workCell consumes one cell until the coordinator closes it.
func workCell(ctx context.Context, base Options, ctl *pgxpool.Pool, wid string, row *cellRow, consumers int) error {
	st, err := row.lookup()
	if err != nil {
		return err
	}
	o := base
	o.Spec = &row.spec
	o.Measure = row.measure
	c := &cell{o: o, broker: row.broker, id: row.id, consumer: row.consumer, strategy: st, meters: newMeters(row.measure)}
	if a, ok := st.(inbox.AckOrdering); ok {
		c.ackFirst = a.AckBeforeCommit()
	}
	m := &member{ctl: ctl, id: wid, cell: c}
	c.member = m
	pool, err := c.openInbox(ctx, false)
	if err != nil {
		return m.fail(ctx, err)
	}
	defer pool.Close()
	b, err := openBroker(ctx, c)
	if err != nil {
		return m.fail(ctx, err)
	}
	defer b.Close()
	if err := m.flush(ctx, workerWorking, false, ""); err != nil {
		return err
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	for i := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.consume(cctx, b, row.topic, i, nil); err != nil {
				errs <- err
			}
		}()
	}
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	var failed error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case failed = <-errs:
			break loop
		case <-t.C:
		}
		if err := m.flush(ctx, workerWorking, false, ""); err != nil && ctx.Err() == nil {
			failed = err
			break
		}
		var state string
		var warm *time.Time
		if err := ctl.QueryRow(ctx, "SELECT state, warm_end FROM inboxbench_runs.cell WHERE cell_id = $1", row.id).Scan(&state, &warm); err != nil {
			if ctx.Err() != nil {
				break
			}
			failed = fmt.Errorf("postgres: read cell state: %w", err)
			break
		}
		if warm != nil {
			c.warmEnd.Store(warm.UnixNano())
		}
		if state != "open" {
			break
		}
	}
	stop()
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if failed != nil {
		return errors.Join(failed, m.flush(fctx, workerFailed, true, failed.Error()))
	}
	return m.flush(fctx, workerLeft, true, "")
}

func (m *member) fail(ctx context.Context, err error) error {
	return errors.Join(err, m.flush(ctx, workerFailed, false, err.Error()))
}

// flush writes the worker's report for its cell.
func (m *member) flush(ctx context.Context, state string, final bool, errText string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cell
	if keys := m.takeAnswered(); len(keys) > 0 {
		if _, err := m.ctl.Exec(ctx, "INSERT INTO inboxbench_runs.answered (cell_id, keys) VALUES ($1, $2)", c.id, keys); err != nil {
			m.putBack(keys)
			return fmt.Errorf("postgres: report answered messages to the coordinator: %w", err)
		}
	}
	rep := workerReport{Counters: c.c.snapshot(), Progress: c.progress.Load(),
		FirstEffect: c.firstEffect.Load(), LastEffect: c.lastEffect.Load(), RecentP99: c.meters.recentP99(), Error: errText}
	if final {
		rep.Hists = c.meters.export()
		c.noteMu.Lock()
		rep.Notes = append(rep.Notes, c.notes...)
		c.noteMu.Unlock()
	}
	_, err := m.ctl.Exec(ctx, `INSERT INTO inboxbench_runs.worker (cell_id, worker_id, state, report) VALUES ($1, $2, $3, $4)
		ON CONFLICT (cell_id, worker_id) DO UPDATE SET state = EXCLUDED.state, report = EXCLUDED.report, seen_at = now()`,
		c.id, m.id, state, rep)
	if err != nil {
		return fmt.Errorf("postgres: report to the coordinator: %w", err)
	}
	return nil
}

// firstCrash claims the crash fault of an event for the whole cell: the
// process that takes over after the kill must not crash on its
// redelivery again.
func (m *member) firstCrash(ctx context.Context, key string) bool {
	tag, err := m.ctl.Exec(ctx, "INSERT INTO inboxbench_runs.crash (cell_id, event_key) VALUES ($1, $2) ON CONFLICT DO NOTHING", m.cell.id, key)
	return err == nil && tag.RowsAffected() == 1
}

// die is the crash fault in a worker process: after the commit and before
// the ack, the process reports what it did and kills itself with SIGKILL
// — no deferred function, no broker goodbye, exactly like kill -9.
func (m *member) die(ctx context.Context) {
	m.amu.Lock()
	m.dying = true
	m.amu.Unlock()
	m.cell.c.crashes.Add(1)
	if err := m.flush(context.WithoutCancel(ctx), workerCrashed, true, ""); err != nil {
		fmt.Fprintln(os.Stderr, "worker: final report before the crash:", err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
