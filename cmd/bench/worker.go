package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/runner"
)

func newWorkerCmd(cfg *config.Config) *cobra.Command {
	var (
		runID     string
		consumers int
		join      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker --run-id RUN_ID",
		Short: "Consume a run's cells as a separate process (started by 'bench run --workers', or by you on other machines)",
		Long: `A worker joins a run by id and consumes its cells one after the other:
it subscribes to the cell's topic with the run's consumer group, applies
every delivery through the cell's inbox strategy and acks only after the
database decided — exactly what the in-process consumers of 'bench run' do.

There is no cluster protocol: the broker's consumer group shares the
partitions/queues among all workers, and PostgreSQL holds the run's state
(schema inboxbench_runs): which cell is open, each worker's counters and,
when it leaves, its latency histograms. So workers can run on other
machines; they need the same --pg-url and broker settings as the run, and
clocks kept in step (NTP) for end-to-end latency.

On a crash fault (crash_after_commit) a worker kills itself with SIGKILL
between the database commit and the ack — a real kill -9 — after recording
the event so the process that takes over does not crash on it again; with
a backlog (bench conform's crash-with-backlog) it dies before the commit,
once its subscription holds another batch beyond the one in its handler.
'bench run --workers N' starts N workers and replaces a dead one; workers
you start yourself need a supervisor that restarts them (systemd,
Kubernetes, a shell loop).

A worker exits 0 when the run finishes, and gives up when the run does not
appear within --join-timeout or its coordinator falls silent for a minute.`,
		Example: `  # on the coordinator
  bench run --brokers kafka --workload default --remote-workers 2 --run-id nightly
  # on two other machines
  bench worker --run-id nightly --pg-url postgres://… --kafka-brokers k1:9092,k2:9092`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runID == "" {
				return usagef("--run-id is required: the id printed by 'bench run --remote-workers N' (or given to it with --run-id)")
			}
			if consumers < 1 {
				return usagef("--consumers %d: must be at least 1", consumers)
			}
			return runner.Work(c.Context(), runner.WorkerOptions{Cfg: *cfg, RunID: runID, Consumers: consumers,
				JoinTimeout: join, Console: runner.Console{Progress: os.Stderr}})
		},
	}
	f := cmd.Flags()
	f.StringVar(&runID, "run-id", "", "the run to join (required)")
	f.IntVar(&consumers, "consumers", 1, "subscriptions this process runs")
	f.DurationVar(&join, "join-timeout", 2*time.Minute, "give up when the run has not appeared after this long")
	return cmd
}

// workerCommand starts a `bench worker` with this very program, so the
// workers a run starts are the same build as the run.
func workerCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start workers with: %w", err)
	}
	return []string{exe, "worker"}, nil
}
