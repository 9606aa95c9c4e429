package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/conform"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/render"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/service"
)

func newConformCmd(cfg *config.Config) *cobra.Command {
	var fl conformFlags
	cmd := &cobra.Command{
		Use:   "conform",
		Short: "Judge broker + inbox setups: the article's experiments and real faults on every broker × strategy",
		Long: `Runs named scenarios — the article's four experiments (duplicate, split,
concurrent, order) and the faults that happen in production (lost acks,
republishes, rebalances, reordering, duplicate storms, a hot aggregate,
snapshots, idempotency conflicts, retention shorter than the replay window,
killed database connections, poison messages, a broker restart) and the
faults of an external call (external-*: timeouts after the service applied
the call, a handler dying between the call and the commit, the service
unavailable) and failovers on the replicated stack (leader-kill, leader-pause,
rolling-restart, leader-kill-after-lag of the broker's cluster, pg-* of
PostgreSQL's primary; N/A elsewhere) — on every broker × strategy, and compares each outcome with
the expectation declared in code: every correct strategy passes every
scenario of its kind (the external strategies the external-* scenarios,
the database-only ones the others); every negative control is caught by
the scenarios that target it — the broken-* strategies, and the transport
controls transport-early-settle/tx and /batch (a correct strategy whose
driver settles each delivery on receipt, before the handler: caught by
crash-with-backlog, consumer-crash and ack-lost); every *-weak control (a cluster's
weak setting: Kafka acks=1, asynchronous PostgreSQL replication) must FAIL
with lost-effect.

Prints the matrix, the article's lines, and the mutation score (negative
controls caught / run); writes OUT/RUN_ID/conform.json for 'bench report'.
Exit 1 if any cell is not as expected — a negative control that passes is a
failure of the suite.`,
		Example: `  bench conform --list
  bench conform --brokers rabbitmq --scenarios duplicate --strategies tx
  bench conform --brokers kafka,rocketmq --scenarios order,reorder
  bench conform --brokers none,kafka --scenarios 'external-*'
  bench conform --brokers rabbitmq,kafka --service examples/services/java-inbox/service.yaml
  bench conform --topology replicated --brokers kafka --scenarios 'leader-*,pg-leader-*'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if fl.list {
				return listScenarios()
			}
			return runConform(c, cfg, &fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.brokers, "brokers", "rabbitmq,kafka,rocketmq", "comma-separated brokers (none and kafka-embedded work too)")
	f.StringVar(&fl.scenarios, "scenarios", "", "comma-separated scenarios or patterns such as 'external-*' (default: all; see --list)")
	f.StringVar(&fl.strategies, "strategies", "all,external,broken", "comma-separated strategies; 'all' = every correct database-only one, 'external' = every correct one that calls the external service, 'broken' = every negative control (the broken-* strategies and the transport controls transport-early-settle/tx, /batch)")
	f.StringVar(&fl.out, "out", "results", "directory that receives the run directory")
	f.StringVar(&fl.runID, "run-id", "", "name of the run directory (default: UTC timestamp + -conform)")
	f.BoolVar(&fl.list, "list", false, "list the scenarios with what each proves, and exit")
	f.StringArrayVar(&fl.files, "strategy-file", nil, strategyFileHelp)
	f.StringArrayVar(&fl.services, "service", nil, "a service spec (YAML, docs/services.md): your own consumer service under test, judged in every scenario that can be applied from outside (the others are N/A, with why); repeat for several, e.g. its variants that make a mistake on purpose. Without --strategies, only the services run")
	return cmd
}

// conformFlags are the flags of 'bench conform'.
type conformFlags struct {
	brokers, scenarios, strategies, out, runID string
	list                                       bool
	files, services                            []string
}

// listScenarios prints every scenario with what it proves and catches.
func listScenarios() error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tTIMEOUT\tCATCHES\tPROVES")
	for _, s := range conform.Scenarios() {
		catches := strings.Join(s.Catches, ",")
		if catches == "" {
			catches = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Timeout, catches, s.Proves)
	}
	return tw.Flush()
}

// runConform runs the matrix, writes conform.json and prints the matrix
// and the mutation score.
func runConform(c *cobra.Command, cfg *config.Config, fl *conformFlags) error {
	var names []string
	if fl.scenarios != "" {
		names = strings.Split(fl.scenarios, ",")
	}
	scs, err := conform.Select(names)
	if err != nil {
		return usageError{err}
	}
	bs, err := parseBrokers(fl.brokers)
	if err != nil {
		return err
	}
	var sts []inbox.Strategy
	if len(fl.services) == 0 || c.Flags().Changed("strategies") {
		if sts, err = conformStrategies(fl.strategies); err != nil {
			return err
		}
	}
	var svcs []*service.Spec
	for _, f := range fl.services {
		sp, err := service.Load(f)
		if err != nil {
			return usagef("--service: %v", err)
		}
		svcs = append(svcs, sp)
	}
	extra, err := loadStrategyFiles(fl.files)
	if err != nil {
		return err
	}
	sts = append(sts, extra...)
	servers, _, err := checkServices(c.Context(), cfg, bs)
	if err != nil {
		return err
	}
	if fl.runID == "" {
		fl.runID = runner.NewRunID() + "-conform"
	}
	stackDir, _ := compose.AbsDir(cfg.StackDir)
	workerCmd, err := workerCommand()
	if err != nil {
		return err
	}
	start := time.Now().UTC()
	subjects := strategyNames(sts)
	for _, sp := range svcs {
		subjects = strings.TrimPrefix(subjects+", "+sp.Label(), ", ")
	}
	fmt.Fprintf(os.Stderr, "conform %s: %d scenarios × %d brokers, %s\n", fl.runID, len(scs), len(bs), subjects)
	rows := conform.Run(c.Context(), conform.Options{
		Env:       conform.Env{Cfg: *cfg, StackDir: stackDir, Out: os.Stdout, WorkerCmd: workerCmd},
		Scenarios: scs, Brokers: bs, Strategies: sts, Services: svcs, Progress: os.Stderr,
	})
	scenarioNote := "scenarios: " + fl.scenarios
	if fl.scenarios == "" {
		scenarioNote = "scenarios: all"
	}
	doc := conform.Result(conform.RunInfo{ID: fl.runID, Started: start, Servers: servers, Args: os.Args, Notes: []string{scenarioNote}}, rows)
	path, err := doc.Write(filepath.Join(fl.out, fl.runID))
	if err != nil {
		return err
	}
	_ = render.WriteMatrix(os.Stdout, rows)
	_ = render.WriteConformFaults(os.Stdout, rows)
	sum := results.Summarize(rows)
	fmt.Printf("\n%d of %d cells as expected; mutation score %d/%d", sum.AsExpected, sum.Rows, sum.BrokenCaught, sum.BrokenTotal)
	if sum.BrokenTotal > 0 {
		fmt.Printf(" (%.0f%%)", 100*sum.MutationScore)
	}
	if len(sum.Survivors) > 0 {
		fmt.Printf("; not caught: %s", strings.Join(sum.Survivors, ", "))
	}
	fmt.Println()
	for _, t := range results.TallyStrategies(rows) {
		fmt.Printf("  %s: %d run, %d N/A, %d not as expected\n", t.Strategy, t.Ran, t.NotApplicable, t.Bad)
	}
	fmt.Printf("result: %s\n", path)
	if c.Context().Err() != nil {
		return c.Context().Err()
	}
	if sum.Verdict != results.VerdictPass || len(sum.Survivors) > 0 {
		return failure{"conformance: some cells were not as expected"}
	}
	return nil
}

// conformStrategies resolves the list; "broken" adds every negative
// control (each named in full in the output).
func conformStrategies(list string) ([]inbox.Strategy, error) {
	var out []inbox.Strategy
	seen := map[string]bool{}
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		var ss []inbox.Strategy
		switch part {
		case "":
			continue
		case "broken":
			for _, s := range inbox.Strategies() {
				if s.Broken() {
					ss = append(ss, s)
				}
			}
			ss = append(ss, conform.TransportControls()...)
		default:
			r, err := inbox.Resolve(part)
			if i := slices.IndexFunc(conform.TransportControls(), func(s inbox.Strategy) bool { return s.Name() == part }); err != nil && i >= 0 {
				r, err = conform.TransportControls()[i:i+1], nil
			}
			if err != nil {
				return nil, usagef("--strategies %q: %v", part, err)
			}
			ss = r
		}
		for _, s := range ss {
			if !seen[s.Name()] {
				seen[s.Name()] = true
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		return nil, usagef("--strategies is empty: see 'bench inbox strategies'")
	}
	return out, nil
}

func strategyNames(ss []inbox.Strategy) string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name())
	}
	return strings.Join(n, ",")
}
