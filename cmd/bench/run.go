package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/failover"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/render"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/service"
	"github.com/inboxbench/inboxbench/workload"
)

func newRunCmd(cfg *config.Config) *cobra.Command {
	var fl runFlags
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
inbox-without-effect, effect-without-inbox, parked-stuck, conflict-accepted,
dedup-miss).

An event the inbox cannot decide is never acked as applied: a failure that
may heal is retried (--retry-attempts, --retry-for), one that will not is
dead-lettered at once, and the cell's verdict is ERROR naming the first
failure of each kind.

--brokers none drives the same events straight into the inbox with the same
concurrency: the database-only baseline to compare broker cells with.

A workload's faults.failover (workloads/failover.yaml) hits nodes of the
replicated stack mid-stream (--topology replicated): the leader of the cell's
partitions or queues, or PostgreSQL's primary, killed, paused or restarted in
turn. Each fault's publish and consume outage, errors, retries, redeliveries,
duplicates and e2e p99.9 are printed under the summary and recorded in
result.json.

Consumers run as goroutines of this process by default. With --workers N
they are N 'bench worker' processes (a crash fault is then a real kill -9,
and a dead worker is replaced); with --remote-workers M each cell also
waits for M workers started elsewhere with 'bench worker --run-id RUN_ID'.
Either sets the number of consumers. none and kafka-embedded live inside
this process, so their consumers stay goroutines.

On one host the harness waits for a core like the servers do, and every
latency at a rate carries that wait. To keep it out, give the harness CPUs of
its own: start the stack with 'taskset -c 1 bench stack up' and the run with
'taskset -c 0 bench run ...' (say 2-15 and 0-1 on a larger host); result.json
then notes on which CPUs the harness and each local server ran
(docs/running.md, "the harness on CPUs of its own").

Results go to OUT/RUN_ID/result.json. Exit 1 if a correct strategy fails its
check; negative controls (broken-*) are expected to fail.`,
		Example: `  bench run --brokers none,kafka --workload smoke
  bench run --brokers rabbitmq,kafka,rocketmq --workload workloads/faults.yaml --strategies tx,batch
  bench run --brokers kafka --workload smoke --strategies broken-split
  bench run --brokers none,kafka --workload smoke --strategies tx --strategy-file my-inbox.sql
  bench run --brokers none,rabbitmq,kafka --workload default --service examples/services/java-inbox/service.yaml
  bench run --brokers rabbitmq,kafka,rocketmq --workload faults --workers 3
  bench run --topology replicated --brokers kafka --workload failover`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("partition-interval") && !fl.partitioned {
				return usagef("--partition-interval needs --partitioned-inbox")
			}
			o, err := fl.options(cfg)
			if err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			if o.Output.Servers, o.Output.ServerNotes, err = checkServices(c.Context(), cfg, o.Brokers); err != nil {
				return err
			}
			o.Output.Durability = serverDurability(c.Context(), cfg)
			warnDisk(cfg)
			if fl.cpuProfile != "" {
				stop, err := startCPUProfile(fl.cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			run, dir, err := runner.Run(c.Context(), o)
			if run != nil {
				_ = render.WriteSummary(os.Stdout, run)
				fmt.Printf("\nresult: %s\n", filepath.Join(dir, "result.json"))
			}
			if errors.Is(err, runner.ErrRunExists) {
				return usageError{err}
			}
			if err != nil {
				return strategyFileErr(err)
			}
			return verdictError(run)
		},
	}
	fl.register(cmd.Flags())
	return cmd
}

// warnDisk warns on stderr when the disk of the local stack is too full
// for a run (compose.DiskNote); a stack elsewhere is not looked at. Used
// by 'bench run' and 'bench stack up'.
func warnDisk(cfg *config.Config) {
	if dir, err := compose.AbsDir(cfg.StackDir); err == nil {
		if n := compose.DiskNote(dir); n != "" {
			fmt.Fprintln(os.Stderr, "warning: "+n)
		}
	}
}

// runFlags are the flags of 'bench run'.
type runFlags struct {
	brokers, strategies, workload, out, runID string
	noMeasure, noAudit                        bool
	audit                                     string
	stall, join, retryFor, quiet              time.Duration
	retryAttempts, rounds, warmupRounds       int
	findMax, backlog                          bool
	search                                    runner.RateSearch
	files                                     []string
	workers, remoteWorkers                    int
	partitioned, replace, keepData            bool
	cpuProfile                                string
	partitionInterval                         time.Duration
	externalURL                               string
	externalDelay, warmupFor                  time.Duration
	service                                   string
}

// register binds the flags of 'bench run' to fl.
func (fl *runFlags) register(f *pflag.FlagSet) {
	f.StringVar(&fl.brokers, "brokers", "none,rabbitmq,kafka,rocketmq", "comma-separated brokers: "+strings.Join(brokers.Names(), ", ")+"; 'all' = "+strings.Join(brokers.All(), ","))
	f.StringVar(&fl.workload, "workload", "default", "workload file, or the name of one in workloads/ (smoke, default, contention, faults)")
	f.StringArrayVar(&fl.files, "strategy-file", nil, strategyFileHelp)
	f.StringVar(&fl.service, "service", "", "a service spec (YAML, docs/services.md): your own consumer service under test, in a cell of its own on every broker it consumes from, beside the built-in consumer's cells")
	f.StringVar(&fl.strategies, "strategies", "", "comma-separated inbox strategies, or 'all' for every correct one (default: the workload's strategy); see 'bench inbox strategies'")
	fl.warmupRounds = -1
	f.Var(unsetOr[int]{&fl.warmupRounds, strconv.Atoi, "int"}, "warmup-rounds", "run every cell this many times first, interleaved like the rounds, and keep nothing of them unless a cell fails its checks: a freshly started JVM broker keeps getting faster for minutes (default: the workload's warmup_rounds; none for a rate search); with --warmup-rounds-for, the fewest")
	fl.warmupFor = -1
	f.Var(unsetOr[time.Duration]{&fl.warmupFor, time.ParseDuration, "duration"}, "warmup-rounds-for", "run warm-up rounds of each cell while its rate still rises by more than 10% from one to the next (two at least), for at most this long; 0: the fixed count of --warmup-rounds (default: the workload's warmup_rounds_for)")
	f.IntVar(&fl.rounds, "rounds", 0, "measure every cell this many times, interleaved (each cell in every place of a round equally often), and report medians with their confidence intervals (default: the workload's rounds, else 1)")
	f.StringVar(&fl.out, "out", "results", "directory that receives the run directory")
	f.StringVar(&fl.runID, "run-id", "", "name of the run: its directory, schemas and topics (default: UTC timestamp); a used one is refused")
	f.BoolVar(&fl.replace, "replace", false, "reuse --run-id: drop the schemas, topics and results an earlier run of it left, first")
	f.BoolVar(&fl.keepData, "keep-data", false, "keep the schemas and topics of the cells that passed (by default they are dropped once result.json is written; those of cells that did not pass always stay, for reading)")
	f.BoolVar(&fl.noMeasure, "no-measure", false, "record no latency histograms (to measure what measuring costs)")
	f.BoolVar(&fl.noAudit, "no-audit", false, "do not install the audit trigger the checker uses to see version transitions (the verdict then rests on final state and inbox rows only); the same as --audit off")
	f.StringVar(&fl.audit, "audit", string(inbox.AuditAuto), "how the audit log is captured: auto (wal where the server allows it, else statement; logged when the workload fails PostgreSQL over), wal (decoded from the write-ahead log after the cell: wal_level=logical, a role with REPLICATION), statement (a statement trigger into an unlogged table), row (a row trigger, for comparison), logged (the statement trigger into a logged table, which survives a failover), or off (the same as --no-audit)")
	f.DurationVar(&fl.stall, "stall-timeout", 30*time.Second, "end a cell in which no delivery was acked or dead-lettered for this long")
	f.DurationVar(&fl.quiet, "quiet-wait", 20*time.Second, "before each cell measured for a time, wait up to this long for the host to go quiet (the cell before done with its background work; 0: start at once)")
	f.IntVar(&fl.retryAttempts, "retry-attempts", runner.DefaultRetryBound.Attempts, "dead-letter a delivery whose event failed with a retryable error this many times (lock timeouts, serialization failures …; permanent errors are dead-lettered at once)")
	f.DurationVar(&fl.retryFor, "retry-for", runner.DefaultRetryBound.For, "…or this long after its first failure, whichever comes first")
	f.IntVar(&fl.workers, "workers", 0, "run the consumers as this many 'bench worker' processes (0: goroutines of this process)")
	f.IntVar(&fl.remoteWorkers, "remote-workers", 0, "also wait in each cell for this many workers started elsewhere with 'bench worker --run-id RUN_ID'")
	f.DurationVar(&fl.join, "join-timeout", 2*time.Minute, "how long a cell waits for its workers to join")
	f.StringVar(&fl.cpuProfile, "cpuprofile", "", "write a Go CPU profile of this process to the file (go tool pprof FILE): where the harness itself spends its time")
	f.BoolVar(&fl.findMax, "find-max-rate", false, "per cell, find the maximum sustainable rate with open-loop steps, then measure latency at fractions of it (also: publish_rate: max in the workload)")
	d := runner.DefaultRateSearch
	f.DurationVar(&fl.search.Step, "rate-step", d.Step, "with --find-max-rate: how long each step publishes (its first quarter, at most 2s, is not measured)")
	f.DurationVar(&fl.search.MaxP99, "max-p99", d.MaxP99, "with --find-max-rate: a step whose e2e p99 is above this is not sustainable")
	f.Float64Var(&fl.search.MaxBacklogGrowth, "max-backlog-growth", d.MaxBacklogGrowth, "with --find-max-rate: a step whose backlog grows faster than this share of its rate per second is not sustainable")
	f.Float64Var(&fl.search.Precision, "rate-precision", d.Precision, "with --find-max-rate: stop bisecting when the bracket is within this share")
	fl.search.Fractions = d.Fractions
	f.Var((*numbers)(&fl.search.Fractions), "at-fractions", "with --find-max-rate: fractions of the maximum sustainable rate to measure latency at")
	f.Var((*numbers)(&fl.search.Rates), "at-rates", "absolute rates (events/s) to measure latency at, after the search (implies --find-max-rate)")
	f.BoolVar(&fl.backlog, "backlog", false, "publish each cell's whole stream before its consumers start, and measure the drain")
	f.BoolVar(&fl.partitioned, "partitioned-inbox", false, "use the inbox partitioned by event time (retention drops partitions; see 'bench inbox migrate --help')")
	f.DurationVar(&fl.partitionInterval, "partition-interval", 24*time.Hour, "event-time range of one inbox partition, with --partitioned-inbox")
	f.StringVar(&fl.externalURL, "external-url", "", "the external service that external strategies call, started with 'bench external serve' (default: one in this process on a loopback port, which workers on other machines cannot reach)")
	fl.externalDelay = -1
	f.Var(unsetOr[time.Duration]{&fl.externalDelay, time.ParseDuration, "duration"}, "external-delay", "the external service's time per call, instead of the workload's external.delay")
}

// options turns the flags into runner options; what they name is read
// here (the workload, strategy files), what they mean is checked by
// runner.Options.Validate.
func (fl *runFlags) options(cfg *config.Config) (runner.Options, error) {
	o := runner.Options{Cfg: *cfg, RunID: fl.runID, Replace: fl.replace, KeepData: fl.keepData, Rounds: fl.rounds, WarmupRounds: fl.warmupRounds, WarmupFor: fl.warmupFor,
		Output:   runner.Output{Dir: fl.out, Args: os.Args},
		Measure:  runner.Measure{Latency: !fl.noMeasure, Audit: !fl.noAudit},
		Limits:   runner.Limits{Stall: fl.stall, Quiet: fl.quiet, Retry: runner.RetryBound{Attempts: fl.retryAttempts, For: fl.retryFor}},
		Stream:   runner.Stream{Backlog: fl.backlog},
		Workers:  runner.Workers{Local: fl.workers, Remote: fl.remoteWorkers, JoinTimeout: fl.join},
		Inbox:    inbox.Layout{Partitioned: fl.partitioned, Interval: fl.partitionInterval},
		External: runner.ExternalService{URL: fl.externalURL},
		Console:  runner.Console{Progress: os.Stderr, TTY: term.IsTerminal(int(os.Stderr.Fd()))}}
	mode, err := inbox.ParseAuditMode(fl.audit)
	if err != nil {
		return o, usagef("--audit: %v", err)
	}
	o.Measure.AuditMode = mode
	if mode == inbox.AuditOff {
		o.Measure.Audit = false
	}
	if o.Spec, err = workload.Load(fl.workload); err != nil {
		return o, usageError{err}
	}
	if fl.externalDelay >= 0 {
		o.Spec.External.Delay = workload.Duration(fl.externalDelay)
		if err := o.Spec.Validate(); err != nil {
			return o, usagef("--external-delay %s: %v", fl.externalDelay, err)
		}
	}
	if o.Brokers, err = parseBrokers(fl.brokers); err != nil {
		return o, err
	}
	if o.Extra, err = loadStrategyFiles(fl.files); err != nil {
		return o, err
	}
	switch {
	case fl.strategies != "":
		ss, err := inbox.Resolve(fl.strategies)
		if err != nil {
			return o, usagef("--strategies %q: %v", fl.strategies, err)
		}
		for _, s := range ss {
			o.Strategies = append(o.Strategies, s.Name())
		}
	case len(o.Extra) == 0:
		// Only the files when files are given, unless --strategies adds
		// built-ins beside them; else the workload's strategies.
		ss, err := inbox.Resolve(o.Spec.Strategy)
		if err != nil {
			return o, usagef("workload %s: strategy %q: %v", o.Spec.Name, o.Spec.Strategy, err)
		}
		for _, s := range ss {
			o.Strategies = append(o.Strategies, s.Name())
		}
	}
	if fl.findMax || len(fl.search.Rates) > 0 {
		o.Search = &fl.search
	}
	if fl.service != "" {
		if o.Service, err = service.Load(fl.service); err != nil {
			return o, usagef("--service: %v", err)
		}
	}
	if err := failoverPlan(&o, cfg); err != nil {
		return o, err
	}
	if fl.workers > 0 {
		if o.Workers.Cmd, err = workerCommand(); err != nil {
			return o, err
		}
	}
	if o.RunID == "" && fl.remoteWorkers > 0 {
		o.RunID = runner.NewRunID()
	}
	return o, nil
}

// failoverPlan lets the runner inject the workload's failover faults into
// the stack the endpoints point at, after checking that every fault can
// hit a replicated service for every broker of the run.
func failoverPlan(o *runner.Options, cfg *config.Config) error {
	faults := o.Spec.Faults.Failover
	if len(faults) == 0 {
		return nil
	}
	dir, err := compose.AbsDir(cfg.StackDir)
	if err != nil {
		return err
	}
	stack := failover.Stack{Cfg: *cfg, Dir: dir}
	for _, b := range o.Brokers {
		for i, f := range faults {
			if err := stack.Check(f.Target, b); err != nil {
				return usagef("workload %s: faults.failover[%d] (%s) with broker %s: %v", o.Spec.Name, i, f.Name(), b, err)
			}
		}
	}
	o.Stream.Failover = stack.Injector()
	return nil
}

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, usagef("--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
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
		names := []string{b}
		if b == "all" {
			names = brokers.All()
		} else if !known[b] {
			return nil, usagef("--brokers: unknown broker %q: choose from %s, or all", b, strings.Join(brokers.Names(), ", "))
		}
		for _, n := range names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		return nil, usagef("--brokers is empty: choose from %s", strings.Join(brokers.Names(), ", "))
	}
	return out, nil
}

// checkServices checks the services a run needs before any event is
// published, so a stopped broker is a clear error naming it, and returns
// their versions for the result's env.
func checkServices(ctx context.Context, cfg *config.Config, bs []string) (map[string]string, []string, error) {
	e, err := compose.NewEnv(*cfg, os.Stderr)
	if err != nil {
		return nil, nil, err
	}
	return checkReachable(ctx, e, append([]string{"postgres"}, brokerServices(bs)...))
}

// brokerServices are the stack services the brokers run as, each once:
// what their drivers registered (brokers.Info), none for a broker that
// lives in this process.
func brokerServices(bs []string) []string {
	var out []string
	for _, b := range bs {
		if s := brokers.InfoOf(b).Service; s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// checkReachable asks each named service once (20 s at most) and fails
// naming every one that does not answer; else it returns their versions,
// and notes naming the CPUs of each local server limited to some of the
// host's.
func checkReachable(ctx context.Context, e *compose.Env, names []string) (map[string]string, []string, error) {
	if len(names) == 0 {
		return map[string]string{}, nil, nil // compose.Select would select every service
	}
	svcs, err := compose.Select(e.Variant, names)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	versions := map[string]string{}
	var bad, pinned []string
	var refused []error
	for _, r := range compose.Status(ctx, e, svcs) {
		switch {
		case r.Refused():
			refused = append(refused, fmt.Errorf("%s at %s: %w", r.Service, r.Address, r.Err))
		case !r.Healthy:
			bad = append(bad, fmt.Sprintf("%s at %s: %s", r.Service, r.Address, r.Detail))
		default:
			versions[r.Service] = r.Version
			if r.CPUs != "" {
				pinned = append(pinned, fmt.Sprintf("the %s server ran on CPUs %s", r.Service, r.CPUs))
			}
		}
	}
	if len(refused) > 0 {
		// The services answered: a usage error (exit 2) naming each
		// setting, not a service to start.
		args := make([]any, len(refused))
		for i, r := range refused {
			args[i] = r
		}
		return nil, nil, fmt.Errorf("refused the configured settings:"+strings.Repeat("\n  %w", len(refused)), args...)
	}
	if len(bad) > 0 {
		return nil, nil, fmt.Errorf("not reachable:\n  %s\nstart the local stack with 'bench stack up%s' or point the flags/INBOXBENCH_* variables at your servers", strings.Join(bad, "\n  "), compose.VariantFlag(e.Variant))
	}
	return versions, pinned, nil
}

// verdictError fails the command when a correct strategy did not pass.
func verdictError(run *results.Run) error {
	var bad []string
	for _, c := range run.Cells {
		if !c.Broken && c.Invariants.Verdict != results.VerdictPass {
			bad = append(bad, c.Broker+"/"+c.Strategy)
		}
	}
	if len(bad) > 0 {
		return failure{fmt.Sprintf("check failed for %s", strings.Join(bad, ", "))}
	}
	return nil
}

// serverDurability reads what a PostgreSQL commit means and the local
// stack's durability profile, for the result's environment.
func serverDurability(ctx context.Context, cfg *config.Config) *results.Durability {
	var env results.Env
	e, err := compose.NewEnv(*cfg, nil)
	if err != nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	compose.FillDurability(dctx, e, &env)
	return env.Durability
}

// numbers is a comma-separated list of numbers as a flag, shown in --help
// the way a user writes it ("0.5,0.8,0.95"), not as Go formats a slice.
type numbers []float64

func (n *numbers) String() string {
	s := make([]string, len(*n))
	for i, x := range *n {
		s[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

// Set replaces the list (a flag given twice keeps the last).
func (n *numbers) Set(v string) error {
	var out []float64
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", f)
		}
		out = append(out, x)
	}
	*n = out
	return nil
}

func (n *numbers) Type() string { return "numbers" }

// unsetOr is a flag of a count or a duration whose default is taken from
// elsewhere (the workload): unset it holds -1 and prints nothing, so
// --help shows no "(default -1)"; a negative value is refused.
type unsetOr[T int | time.Duration] struct {
	v     *T
	parse func(string) (T, error)
	typ   string // what --help calls the value
}

func (u unsetOr[T]) String() string {
	if u.v == nil || *u.v < 0 {
		return ""
	}
	return fmt.Sprint(*u.v)
}

func (u unsetOr[T]) Set(s string) error {
	x, err := u.parse(s)
	if err != nil {
		return err
	}
	if x < 0 {
		return fmt.Errorf("%s is negative", s)
	}
	*u.v = x
	return nil
}

func (u unsetOr[T]) Type() string { return u.typ }
