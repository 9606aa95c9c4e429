package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

func newRunCmd(cfg *config.Config) *cobra.Command {
	var (
		brokerList, strategyList, workloadPath, out, runID string
		noMeasure, noAudit                                 bool
		stall, join                                        time.Duration
		strategyFiles                                      []string
		workers, remoteWorkers                             int
		partitioned                                        bool
		cpuProfile                                         string
		partitionInterval                                  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a workload through brokers into the inbox, measure it, and check every event took effect once",
		Long: `Runs the same deterministic workload through each broker × strategy cell into a
fresh inbox schema, measures it, then checks the database against the
workload's oracle. Cells run one after another, so they never compete.

Per cell it records throughput (durable effects/s, per-second series),
latencies (end-to-end from the intended publish time to the commit,
publish→confirm, apply by result, and dedup: delivery → DUPLICATE → ack),
counters (published, deliveries, executions, effects, duplicates,
redeliveries, gaps, parked, stale, conflicts, retries, errors), lock
contention sampled every 100ms, and the checker's verdict with named
anomalies (lost-effect, duplicate-effect, version-gap, stale-applied,
inbox-without-effect, effect-without-inbox, parked-stuck, conflict-accepted).

--brokers none drives the same events straight into the inbox with the same
concurrency: the database-only baseline to compare broker cells with.

Consumers run as goroutines of this process by default. With --workers N
they are N 'bench worker' processes (a crash fault is then a real kill -9,
and a dead worker is replaced); with --remote-workers M each cell also
waits for M workers started elsewhere with 'bench worker --run-id RUN_ID'.
Either sets the number of consumers. none and kafka-embedded live inside
this process, so their consumers stay goroutines.

Results go to OUT/RUN_ID/result.json. Exit 1 if a correct strategy fails its
check; negative controls (broken-*) are expected to fail.`,
		Example: `  bench run --brokers none,kafka --workload smoke
  bench run --brokers rabbitmq,kafka,rocketmq --workload workloads/faults.yaml --strategies tx,batch
  bench run --brokers kafka --workload smoke --strategies broken-split
  bench run --brokers none,kafka --workload smoke --strategies tx --strategy-file my-inbox.sql
  bench run --brokers rabbitmq,kafka,rocketmq --workload faults --workers 3`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			spec, err := workload.Load(workloadPath)
			if err != nil {
				return usageError{err}
			}
			bs, err := parseBrokers(brokerList)
			if err != nil {
				return err
			}
			strategies := []string{spec.Strategy}
			if strategyList != "" {
				ss, err := inbox.Resolve(strategyList)
				if err != nil {
					return usagef("--strategies %q: %v", strategyList, err)
				}
				strategies = strategies[:0]
				for _, s := range ss {
					strategies = append(strategies, s.Name())
				}
			} else if _, err := inbox.Lookup(spec.Strategy); err != nil {
				return usagef("workload %s: strategy: %v", workloadPath, err)
			}
			extra, err := loadStrategyFiles(strategyFiles)
			if err != nil {
				return err
			}
			if len(extra) > 0 && strategyList == "" {
				strategies = nil // only the files, unless --strategies adds built-ins beside them
			}
			servers, err := checkServices(c.Context(), cfg, bs)
			if err != nil {
				return err
			}
			if workers < 0 || remoteWorkers < 0 {
				return usagef("--workers and --remote-workers count processes: 0 or more")
			}
			if c.Flags().Changed("partition-interval") && !partitioned {
				return usagef("--partition-interval needs --partitioned-inbox")
			}
			if partitioned {
				if err := inbox.ValidatePartitionInterval(partitionInterval); err != nil {
					return usagef("--partition-interval: %v", err)
				}
			}
			var workerCmd []string
			if workers > 0 {
				if workerCmd, err = workerCommand(); err != nil {
					return err
				}
			}
			if runID == "" && remoteWorkers > 0 {
				runID = runner.NewRunID()
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return usagef("--cpuprofile: %v", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			tty := term.IsTerminal(int(os.Stderr.Fd()))
			run, dir, err := runner.Run(c.Context(), runner.Options{
				Workers: workers, RemoteWorkers: remoteWorkers, WorkerCmd: workerCmd, JoinTimeout: join,
				InboxLayout: inbox.Layout{Partitioned: partitioned, Interval: partitionInterval},
				Cfg:         *cfg, Spec: spec, Brokers: bs, Strategies: strategies, Extra: extra, OutDir: out, RunID: runID,
				Measure: !noMeasure, Audit: !noAudit, Progress: os.Stderr, TTY: tty, StallTimeout: stall,
				Args: os.Args, Servers: servers,
			})
			if run != nil {
				printSummary(run)
				fmt.Printf("\nresult: %s\n", filepath.Join(dir, "result.json"))
			}
			if err != nil {
				return strategyFileErr(err)
			}
			return verdictError(run)
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokerList, "brokers", "none,rabbitmq,kafka,rocketmq", "comma-separated brokers: "+strings.Join(brokers.Names(), ", "))
	f.StringVar(&workloadPath, "workload", "default", "workload file, or the name of one in workloads/ (smoke, default, contention, faults)")
	f.StringArrayVar(&strategyFiles, "strategy-file", nil, strategyFileHelp)
	f.StringVar(&strategyList, "strategies", "", "comma-separated inbox strategies, or 'all' for every correct one (default: the workload's strategy); see 'bench inbox strategies'")
	f.StringVar(&out, "out", "results", "directory that receives the run directory")
	f.StringVar(&runID, "run-id", "", "name of the run directory (default: UTC timestamp)")
	f.BoolVar(&noMeasure, "no-measure", false, "record no latency histograms (to measure what measuring costs)")
	f.BoolVar(&noAudit, "no-audit", false, "do not install the audit trigger the checker uses to see version transitions (the verdict then rests on final state and inbox rows only)")
	f.DurationVar(&stall, "stall-timeout", 30*time.Second, "end a cell that makes no progress for this long")
	f.IntVar(&workers, "workers", 0, "run the consumers as this many 'bench worker' processes (0: goroutines of this process)")
	f.IntVar(&remoteWorkers, "remote-workers", 0, "also wait in each cell for this many workers started elsewhere with 'bench worker --run-id RUN_ID'")
	f.DurationVar(&join, "join-timeout", 2*time.Minute, "how long a cell waits for its workers to join")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of this process to the file (go tool pprof FILE): where the harness itself spends its time")
	f.BoolVar(&partitioned, "partitioned-inbox", false, "use the inbox partitioned by event time (retention drops partitions; see 'bench inbox migrate --help')")
	f.DurationVar(&partitionInterval, "partition-interval", 24*time.Hour, "event-time range of one inbox partition, with --partitioned-inbox")
	return cmd
}

func parseBrokers(list string) ([]string, error) {
	known := map[string]bool{}
	for _, n := range brokers.Names() {
		known[n] = true
	}
	var out []string
	for _, b := range strings.Split(list, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		if !known[b] {
			return nil, usagef("--brokers: unknown broker %q: choose from %s", b, strings.Join(brokers.Names(), ", "))
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, usagef("--brokers is empty: choose from %s", strings.Join(brokers.Names(), ", "))
	}
	return out, nil
}

// checkServices checks the services a run needs before any event is
// published, so a stopped broker is a clear error naming it, and returns
// their versions for the result's env.
func checkServices(ctx context.Context, cfg *config.Config, bs []string) (map[string]string, error) {
	need := []string{"postgres"}
	for _, b := range bs {
		switch b {
		case "rabbitmq", "kafka", "rocketmq":
			need = append(need, b)
		}
	}
	svcs, err := compose.Select(need)
	if err != nil {
		return nil, err
	}
	dir, _ := compose.AbsDir(cfg.StackDir)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	versions := map[string]string{}
	var bad []string
	for _, r := range compose.Status(ctx, &compose.Env{Dir: dir, Cfg: *cfg, Out: os.Stderr}, svcs) {
		if !r.Healthy {
			bad = append(bad, fmt.Sprintf("%s at %s: %s", r.Service, r.Address, r.Detail))
			continue
		}
		versions[r.Service] = r.Version
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("not reachable:\n  %s\nstart the local stack with 'bench stack up' or point the flags/INBOXBENCH_* variables at your servers", strings.Join(bad, "\n  "))
	}
	return versions, nil
}

// printSummary prints broker × strategy → events/s, e2e p50/p99, dedup
// p99, lock-wait share, verdict.
func printSummary(run *results.Run) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BROKER\tSTRATEGY\tEVENTS/S\tvs none\tBOUND BY\tHOST CPU\tE2E P50\tE2E P99\tDEDUP P99\tLOCK WAIT\tVERDICT\t")
	for i, c := range run.Cells {
		ratio := run.VsNone(&run.Cells[i])
		verdict := c.Invariants.Verdict
		if c.Broken {
			verdict += " (negative control: FAIL expected)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Broker, c.Strategy, results.FormatRate(c.Throughput.EventsPerS), ratio, c.BoundText(), c.HostCPUText(),
			us(c.Latency.E2E.P50), us(c.Latency.E2E.P99), us(c.Latency.Dedup.P99), results.FormatShare(c.Contention.LockWaitShare), verdict)
	}
	tw.Flush()
	for _, c := range run.Cells {
		if c.Error != "" {
			fmt.Printf("\n%s/%s: %s\n", c.Broker, c.Strategy, c.Error)
		}
		for _, n := range runner.AnomalyNames {
			if k := c.Invariants.Anomalies[n]; k > 0 {
				fmt.Printf("%s/%s: %s × %d, e.g. %s\n", c.Broker, c.Strategy, n, k, strings.Join(c.Invariants.Examples[n], "; "))
			}
		}
	}
}

func us(v int64) string {
	if v == 0 {
		return "-"
	}
	return results.FormatMicros(v)
}

// verdictError fails the command when a correct strategy did not pass.
func verdictError(run *results.Run) error {
	var bad []string
	for _, c := range run.Cells {
		if !c.Broken && c.Invariants.Verdict != "PASS" {
			bad = append(bad, c.Broker+"/"+c.Strategy)
		}
	}
	if len(bad) > 0 {
		return failure{fmt.Sprintf("check failed for %s", strings.Join(bad, ", "))}
	}
	return nil
}
