package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/render"
)

// newReportCmd renders a run directory into report.md, report.html and
// the CSV exports. It reads files only: no service needs to be running.
func newReportCmd(_ *config.Config) *cobra.Command {
	var csv bool
	var outDir string
	cmd := &cobra.Command{
		Use:   "report RUN_DIR",
		Short: "Write report.md, report.html (self-contained, offline) and CSV exports for a run directory",
		Long: `Reads RUN_DIR/result.json (written by 'bench run') and, when present,
RUN_DIR/conform.json (written by 'bench conform'), and writes beside them:

  report.md     every figure as Markdown tables, for pull requests and issues
  report.html   one self-contained page: summary, throughput over time, latency
                percentile spectra on log scales, dedup vs apply latency, lock
                contention by wait event, counters, anomalies with examples, the
                conformance matrix, environment and workload. No script, no
                network: it opens offline from disk.
  cells.csv     one row per broker × strategy (numbers only, units in headers)
  series.csv    per-second series in long form: run_id,broker,strategy,series,t_s,value

A directory holding only conform.json is reported too (matrix only).`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("report needs exactly one RUN_DIR (a directory with result.json or conform.json), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			dir := args[0]
			rep, err := results.Load(dir)
			if err != nil {
				// A missing run directory, or a file in it that is not a
				// result, is the user's argument to fix: exit 2.
				return usagef("%v", err)
			}
			if outDir == "" {
				outDir = dir
			} else if err := os.MkdirAll(outDir, 0o755); err != nil {
				return usagef("--out %s: %v", outDir, err)
			}
			paths, err := render.WriteFiles(outDir, rep, render.Outputs(csv))
			for _, p := range paths {
				fmt.Fprintln(c.OutOrStdout(), "wrote", p)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&csv, "csv", true, "also write cells.csv and series.csv (--csv=false to skip)")
	cmd.Flags().StringVar(&outDir, "out", "", "directory for the report files (default: RUN_DIR itself)")
	return cmd
}

// compareLong is bench compare's help.
const compareLong = `Matches the cells of two runs by broker and strategy (or, with --labels A,B,
the cells of strategy label A with those of label B in one run: an A/B of two
strategy files measured interleaved on the same machine) and prints per metric
the medians over the rounds with their spread, the change with its confidence
interval, the Mann-Whitney U test's p and round counts, and a finding:

  regression             worse by more than --max-regression, and p < 0.05
                         (Holm-corrected over the cell's metrics: the smallest p
                         must be below 0.05/4, the next below 0.05/3, …)
  improvement            better by more than --max-regression, and p < 0.05
  no significant change  no difference the test can see and the medians within
                         the threshold, or a real difference smaller than it
  inconclusive           too few rounds to ever reach p < 0.05 (4 or more per
                         side are needed), or medians further apart than the
                         threshold with rounds spread too widely to tell; it
                         says about how many rounds would

events/s decides every cell; e2e and dedup p99 decide only cells run at a rate
(publish_rate), because a saturated cell's latency is the time spent queueing
in its own backlog; the lock-wait share is shown, never decides (an increase
under one percentage point is sampling noise). "vs none", a broker cell's
ratio to the baseline of the same round, is shown, never decides: when
events/s regressed and vs none did not change, the baseline slowed as much,
and the regression says the change is in what every cell shares (the host,
the database, the inbox SQL). A verdict that got worse (a
correct strategy that stops passing, or a negative control no longer caught)
is a regression. Runs of one round per cell still compare, labelled "single
run: no noise estimate": the figures against the threshold alone.

BASE and NEW are run directories (or their result.json). Cells present on one
side only are listed, not compared. Runs of different workloads are refused
(exit 2) unless --allow-different-workloads. Runs measured on different
machines or servers (cores, memory, OS, server versions, durability profile)
are compared under a warning naming each difference.

Exit codes: 0 nothing regressed, 1 a regression (or, with
--fail-on-inconclusive, an inconclusive gating metric), 2 bad usage.`

const compareExample = `  bench compare results/base results/change
  bench run --brokers none --workload default --rounds 5 \
      --strategy-file base=ci/inbox-main.sql --strategy-file new=ci/inbox.sql --run-id ab
  bench compare results/ab --labels base,new --max-regression 5%`

// newCompareCmd compares two runs (or two labels of one run) cell by cell;
// its exit code guards an inbox SQL change in CI: 1 when a cell regressed.
func newCompareCmd(_ *config.Config) *cobra.Command {
	var fl compareFlags
	cmd := &cobra.Command{
		Use:     "compare BASE NEW | compare RUN --labels A,B",
		Short:   "Compare two runs, or two strategy labels of one run: regression, improvement, no significant change or inconclusive",
		Long:    compareLong,
		Example: compareExample,
		Args: func(c *cobra.Command, args []string) error {
			switch {
			case fl.labels != "" && len(args) != 1:
				return usagef("compare --labels A,B needs one RUN directory, got %d arguments", len(args))
			case fl.labels == "" && len(args) != 2:
				return usagef("compare needs BASE and NEW run directories (or one RUN with --labels A,B), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmp, err := fl.compare(args)
			if err != nil {
				return err
			}
			if err := cmp.WriteText(c.OutOrStdout()); err != nil {
				return err
			}
			switch {
			case cmp.Regressed():
				return failure{msg: fmt.Sprintf("%d regression(s) beyond %s", len(cmp.Regressions), fl.maxRegression)}
			case fl.failInconclusive && len(cmp.Inconclusive) > 0:
				return failure{msg: fmt.Sprintf("%d inconclusive metric(s) (--fail-on-inconclusive)", len(cmp.Inconclusive))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&fl.maxRegression, "max-regression", "10%", `smallest change that counts per metric, as a percentage ("10%" or "10")`)
	cmd.Flags().StringVar(&fl.labels, "labels", "", "compare two strategy labels of one run (bench run --strategy-file LABEL=PATH): A,B")
	cmd.Flags().BoolVar(&fl.failInconclusive, "fail-on-inconclusive", false, "exit 1 also when a gating metric is inconclusive")
	cmd.Flags().BoolVar(&fl.allowDifferent, "allow-different-workloads", false, "compare runs whose workload specs differ (the differences are printed)")
	return cmd
}

// compareFlags are the flags of 'bench compare'.
type compareFlags struct {
	maxRegression, labels            string
	allowDifferent, failInconclusive bool
}

// compare reads the runs args name and compares them, or the two labels
// of the one run; what the user gave wrong is a usage error.
func (fl *compareFlags) compare(args []string) (*results.Comparison, error) {
	limit, err := results.ParseThreshold(fl.maxRegression)
	if err != nil {
		return nil, usagef("--max-regression: %v", err)
	}
	opt := results.CompareOptions{MaxRegression: limit, AllowDifferentWorkloads: fl.allowDifferent}
	if fl.labels != "" {
		a, b, ok := strings.Cut(fl.labels, ",")
		if !ok || a == "" || b == "" || a == b || strings.Contains(b, ",") {
			return nil, usagef("--labels %q: give two different strategy labels, e.g. base,new", fl.labels)
		}
		run, err := results.Read(args[0])
		if err != nil {
			return nil, usagef("RUN %s: %v (pass a run directory written by 'bench run')", args[0], err)
		}
		cmp, err := results.CompareLabels(run, a, b, opt)
		if err != nil {
			return nil, usagef("--labels %s: %v", fl.labels, err)
		}
		return cmp, nil
	}
	base, err := results.Read(args[0])
	if err != nil {
		return nil, usagef("BASE %s: %v (pass a run directory written by 'bench run')", args[0], err)
	}
	next, err := results.Read(args[1])
	if err != nil {
		return nil, usagef("NEW %s: %v (pass a run directory written by 'bench run')", args[1], err)
	}
	cmp, err := results.Compare(base, next, opt)
	if errors.Is(err, results.ErrDifferentWorkloads) {
		return nil, usagef("%s and %s: %v; compare runs of the same workload, or pass --allow-different-workloads", args[0], args[1], err)
	}
	return cmp, err
}
