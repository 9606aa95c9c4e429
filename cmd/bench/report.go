package main

import (
	"errors"
	"fmt"
	"os"

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

// newCompareCmd compares two runs cell by cell; its exit code guards an
// inbox SQL change in CI: 1 when any cell regressed beyond the threshold.
func newCompareCmd(_ *config.Config) *cobra.Command {
	var maxRegression string
	var allowDifferent bool
	cmd := &cobra.Command{
		Use:   "compare BASE NEW",
		Short: "Compare two runs cell by cell; exit 1 when one regressed beyond --max-regression",
		Long: `Matches the cells of two runs by broker and strategy and prints, for each,
the change in events/s (lower is worse), e2e p99 and dedup p99 (higher is
worse), lock-wait share (higher is worse; an increase under one percentage
point is treated as sampling noise) and the verdict (a correct strategy that
stops passing, or a negative control no longer caught, is a regression).

BASE and NEW are run directories (or their result.json). Cells present in only
one run are listed, not compared. Runs of different workloads are refused
(exit 2) unless --allow-different-workloads: their figures measure different
things.

Exit codes: 0 no regression, 1 at least one regression, 2 bad usage.

Absolute figures are noisy on shared machines: compare runs measured on the
same machine, and prefer thresholds well above the run-to-run noise you see
when comparing a run with itself.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("compare needs BASE and NEW run directories, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			limit, err := results.ParseThreshold(maxRegression)
			if err != nil {
				return usagef("--max-regression: %v", err)
			}
			base, err := results.Read(args[0])
			if err != nil {
				return usagef("BASE %s: %v (pass a run directory written by 'bench run')", args[0], err)
			}
			next, err := results.Read(args[1])
			if err != nil {
				return usagef("NEW %s: %v (pass a run directory written by 'bench run')", args[1], err)
			}
			cmp, err := results.Compare(base, next, results.CompareOptions{MaxRegression: limit, AllowDifferentWorkloads: allowDifferent})
			if errors.Is(err, results.ErrDifferentWorkloads) {
				return usagef("%s and %s: %v; compare runs of the same workload, or pass --allow-different-workloads", args[0], args[1], err)
			}
			if err != nil {
				return err
			}
			if err := cmp.WriteText(c.OutOrStdout()); err != nil {
				return err
			}
			if cmp.Regressed() {
				return failure{msg: fmt.Sprintf("%d regression(s) beyond %s", len(cmp.Regressions), maxRegression)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&maxRegression, "max-regression", "10%", `largest tolerated worsening per metric, as a percentage ("10%" or "10")`)
	cmd.Flags().BoolVar(&allowDifferent, "allow-different-workloads", false, "compare runs whose workload specs differ (the differences are printed)")
	return cmd
}
