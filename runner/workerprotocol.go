package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/results"
)

// Worker processes. With Options.Workers (Local or Remote), a cell's
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
//     topic, resolved workload, the external service's URL for a strategy
//     that calls it, the crash-with-backlog fault's count), open → closing
//     → closed;
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
// the cell's tally, decides when the cell is done, and runs the same
// checker against the database as for in-process consumers. This file is
// the protocol both sides share: the control schema, the worker states and
// the report. The coordinator's side is fleet.go (the local worker
// processes, started again when they die) and fleetconsumers.go (a cell's
// consumers as those workers); the worker's side is workerprocess.go.

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
ALTER TABLE inboxbench_runs.cell ADD COLUMN IF NOT EXISTS retry_attempts int NOT NULL DEFAULT 0;
ALTER TABLE inboxbench_runs.cell ADD COLUMN IF NOT EXISTS retry_for_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE inboxbench_runs.cell ADD COLUMN IF NOT EXISTS external_url text;
ALTER TABLE inboxbench_runs.cell ADD COLUMN IF NOT EXISTS crash_with_backlog int NOT NULL DEFAULT 0;
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
	Progress    int64            `json:"progress"` // messages settled so far
	FirstEffect int64            `json:"first_effect,omitempty"`
	LastEffect  int64            `json:"last_effect,omitempty"`
	RecentP99   int64            `json:"recent_p99,omitempty"`
	// Hists are the worker's merged histograms, HdrHistogram V2 compressed
	// and base64 encoded, in the final report only.
	Hists    map[string]string `json:"hists,omitempty"`
	Notes    []string          `json:"notes,omitempty"`
	Error    string            `json:"error,omitempty"`
	Failures []results.Failure `json:"failures,omitempty"`
	// DedupMisses counts deliveries of events that had taken effect in
	// this worker and were decided other than DUPLICATE.
	DedupMisses   int64    `json:"dedup_misses,omitempty"`
	DedupExamples []string `json:"dedup_examples,omitempty"`
}
