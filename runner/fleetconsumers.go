package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/internal/ctxtime"
	"github.com/inboxbench/inboxbench/results"
)

// fleetConsumers are a cell's consumers as the fleet's `bench worker` processes, seen
// from the coordinator: it opens the cell to them, keeps the cell's tally
// current from their reports and merges their histograms at the end.
type fleetConsumers struct {
	f     *fleet
	c     *cell
	t     *tally
	notes *notes

	errs     chan error
	cancel   context.CancelFunc
	done     chan struct{}
	progress int64        // the workers' summed settled count at the last read
	lostN    atomic.Int64 // working workers silent for many report intervals
}

// newFleetConsumers are the cell's consumers as the run's worker
// processes, which count in the cell's tally and notes.
func newFleetConsumers(c *cell) *fleetConsumers {
	return &fleetConsumers{f: c.fleet, c: c, t: c.t, notes: c.notes}
}

// start opens the cell to the workers and waits until enough of them have
// joined: publishing earlier would measure the first worker alone.
func (w *fleetConsumers) start(ctx context.Context) error {
	if err := w.open(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(w.f.join)
	for {
		n, err := w.working(ctx)
		switch {
		case err != nil:
			return err
		case n >= w.f.want:
			w.errs, w.done = make(chan error, 1), make(chan struct{})
			fctx, cancel := context.WithCancel(ctx)
			w.cancel = cancel
			go w.follow(fctx)
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("only %d of %d workers joined cell %s within %s: start them with `bench worker --run-id %s` (same --pg-url and broker settings) or lower %s",
				n, w.f.want, w.c.id, w.f.join, w.f.runID, KeyWorkersRemote)
		}
		select {
		case err := <-w.f.errs:
			return err
		default:
		}
		if !ctxtime.Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// open writes the cell's row, with what a worker needs to consume it.
func (w *fleetConsumers) open(ctx context.Context) error {
	c := w.c
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
	var extURL *string
	if c.ext != nil {
		extURL = &c.o.External.URL
	}
	w.f.seq++
	_, err = w.f.ctl.Exec(ctx, `INSERT INTO inboxbench_runs.cell
		(cell_id, run_id, seq, broker, strategy, strategy_path, strategy_file, consumer, topic, spec, measure, state, retry_attempts, retry_for_ms, external_url, crash_with_backlog)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'open', $12, $13, $14, $15)`,
		c.id, w.f.runID, w.f.seq, c.broker, c.strategy.Name(), path, file, c.consumer, c.topic(), spec, c.o.Measure.Latency,
		c.o.Limits.Retry.Attempts, c.o.Limits.Retry.For.Milliseconds(), extURL, c.o.Stream.CrashWithBacklog)
	if err != nil {
		return fmt.Errorf("postgres: open cell %s to the workers: %w", c.id, err)
	}
	return nil
}

// working counts the workers consuming the cell now.
func (w *fleetConsumers) working(ctx context.Context) (int, error) {
	var n int
	err := w.f.ctl.QueryRow(ctx, "SELECT count(*) FROM inboxbench_runs.worker WHERE cell_id = $1 AND state = $2",
		w.c.id, workerWorking).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: count workers: %w", err)
	}
	return n, nil
}

// warm tells the workers when the warm-up ends (their clocks must agree
// with the coordinator's, as for end-to-end latency: run NTP).
func (w *fleetConsumers) warm(ctx context.Context, at time.Time) {
	_, err := w.f.ctl.Exec(ctx, "UPDATE inboxbench_runs.cell SET warm_end = $2 WHERE cell_id = $1", w.c.id, at)
	if err != nil {
		w.notes.add("could not tell the workers the end of the warm-up: " + err.Error())
	}
}

func (w *fleetConsumers) restart(k int) {
	switch {
	case w.f.restart(k):
		w.notes.add(fmt.Sprintf("planned restart %d: worker process %d stopped and started again", k+1, k%len(w.f.slots)))
	case len(w.f.slots) == 0:
		w.notes.add("planned consumer restarts need local worker processes (" + KeyWorkersLocal + "); remote workers were not restarted")
	}
}

func (w *fleetConsumers) failed() <-chan error { return w.errs }

func (w *fleetConsumers) lost() int64 { return w.lostN.Load() }

// follow keeps the cell's tally current from the workers' reports until
// ctx ends.
func (w *fleetConsumers) follow(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-w.f.errs:
			w.errs <- err
			return
		case <-t.C:
		}
		if err := w.gather(ctx, false); err != nil && ctx.Err() == nil {
			w.notes.add("reading worker reports: " + err.Error())
		}
	}
}

// stop closes the cell: the workers stop consuming and send their final
// reports, which are merged.
func (w *fleetConsumers) stop(ctx context.Context) error {
	if w.cancel != nil {
		w.cancel()
		<-w.done
	}
	if _, err := w.f.ctl.Exec(ctx, "UPDATE inboxbench_runs.cell SET state = 'closing' WHERE cell_id = $1", w.c.id); err != nil {
		return fmt.Errorf("postgres: close cell %s: %w", w.c.id, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := w.working(ctx)
		if err != nil {
			return err
		}
		if n == 0 || !ctxtime.Sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	err := w.gather(ctx, true)
	if n := w.f.crashRestarts(); n > 0 {
		w.notes.add(fmt.Sprintf("%d worker process(es) killed with SIGKILL so far in this run and replaced", n))
	}
	_, cerr := w.f.ctl.Exec(ctx, "UPDATE inboxbench_runs.cell SET state = 'closed' WHERE cell_id = $1", w.c.id)
	return errors.Join(err, cerr)
}

// gather sums the workers' latest reports into the cell's tally. Final
// also merges their histograms and notes.
func (w *fleetConsumers) gather(ctx context.Context, final bool) error {
	if err := w.readAnswered(ctx); err != nil {
		return err
	}
	rows, err := w.f.ctl.Query(ctx, `SELECT worker_id, state, report, extract(epoch FROM now() - seen_at)::float8
		FROM inboxbench_runs.worker WHERE cell_id = $1 ORDER BY worker_id`, w.c.id)
	if err != nil {
		return err
	}
	var id, state string
	var rep *workerReport
	var silentS float64
	var sum results.Counters
	var progress, first, last, p99, lost int64
	var failures []results.Failure
	var misses int64
	var examples []string
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &rep, &silentS}, func() error {
		n++
		// Silent for many report intervals without a final report: killed
		// from outside (or its machine is gone). What it answered since
		// its last report is lost with it.
		if state == workerWorking && silentS > 3 {
			lost++
		}
		if rep == nil {
			return nil
		}
		sum = results.AddCounters(sum, rep.Counters)
		failures = mergeFailures(failures, rep.Failures)
		misses += rep.DedupMisses
		examples = append(examples, rep.DedupExamples...)
		progress += rep.Progress
		if f := rep.FirstEffect; f > 0 && (first == 0 || f < first) {
			first = f
		}
		last, p99 = max(last, rep.LastEffect), max(p99, rep.RecentP99)
		if final {
			w.absorb(id, state, rep)
		}
		rep = nil
		return nil
	})
	if err != nil {
		return err
	}
	w.t.c.setConsumerSide(sum)
	w.t.remote.Store(&failures)
	w.t.remoteMisses.Store(misses)
	w.t.remoteExample.Store(&examples)
	w.lostN.Store(lost)
	if progress != w.progress {
		w.progress = progress
		w.t.settled.Add(1)
	}
	w.t.firstEffect.Store(first)
	w.t.lastEffect.Store(last)
	w.t.remoteP99.Store(p99)
	if final {
		w.notes.add(fmt.Sprintf("consumed by %d worker process(es) over the cell", n))
	}
	return nil
}

// absorb takes a worker's final report: its notes, how it ended and its
// histograms.
func (w *fleetConsumers) absorb(id, state string, rep *workerReport) {
	for _, n := range rep.Notes {
		w.notes.add("worker " + id + ": " + n)
	}
	switch state {
	case workerFailed:
		w.notes.add(fmt.Sprintf("worker %s failed: %s", id, rep.Error))
	case workerWorking:
		w.notes.add(fmt.Sprintf("worker %s never sent its final report (killed from outside?): its latencies are missing, and so may be its counts of the last quarter second", id))
	}
	if err := w.t.meters.absorb(id, rep.Hists); err != nil {
		w.notes.add(fmt.Sprintf("worker %s: histograms unreadable: %v", id, err))
	}
}

// readAnswered counts the messages the workers answered since the last
// read, each once however many workers answered it. Rows are consumed
// (deleted) as they are read: identity values of concurrent inserts do
// not become visible in order, so "greater than the last id" would skip.
func (w *fleetConsumers) readAnswered(ctx context.Context) error {
	rows, err := w.f.ctl.Query(ctx, "DELETE FROM inboxbench_runs.answered WHERE cell_id = $1 RETURNING keys", w.c.id)
	if err != nil {
		return err
	}
	var keys []string
	_, err = pgx.ForEachRow(rows, []any{&keys}, func() error {
		w.t.answerAll(keys, nil)
		return nil
	})
	return err
}
