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

// newPublishCmd writes a static site of many runs. It reads files only:
// no service needs to be running, and results copied from other machines
// publish the same way.
func newPublishCmd(_ *config.Config) *cobra.Command {
	var out, threshold string
	cmd := &cobra.Command{
		Use:   "publish RESULTS_DIR... --out SITE",
		Short: "Write a static site of many runs: an index, trends over time, every report, the result schemas",
		Long: `Searches each RESULTS_DIR (recursively) for run directories — those holding
result.json ('bench run') or conform.json ('bench conform') — and writes SITE:

  index.html            every run, newest first: run id, date, workload, brokers ×
                        strategies, verdict, per cell events/s, e2e p99, dedup p99
                        and lock-wait share, git commit, durability profile, machine
  runs/RUN/report.html  the run's report as it was, or rendered into the site when
                        the run has none (the results directories are never written)
  runs/RUN/*.json       the run's files, for tooling
  trends/WORKLOAD.html  each cell that recurs across runs of a workload, over time:
                        events/s, e2e p99, dedup p99, lock-wait share, each point a
                        link to its run; a changed workload or machine class starts
                        a new, marked line instead of joining unlike runs
  schema/               the JSON Schemas of result.json and conform.json

A change point is where a figure moved for good: a change beyond --threshold
that the U test over the runs' rounds shows at p < 0.05. A machine whose
unchanged runs drift by more than 10% wants a larger threshold.

The pages fetch nothing (no script, font or style sheet; charts are inline SVG)
and link relatively, so SITE can be copied anywhere or opened from disk.
SITE must be new, empty, or a site written by an earlier publish (replaced).

Exit codes: 0 written, 2 a RESULTS_DIR missing or holding no runs, a bad --out or --threshold.`,
		Example: `  bench publish results --out site
  bench publish nightly/host-a nightly/host-b --out public
  bench publish results --out site --threshold 25%`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("publish needs at least one RESULTS_DIR (the directory 'bench run' writes into, e.g. results)")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if out == "" {
				return usagef("publish needs --out SITE: the directory to write the site into")
			}
			limit, err := results.ParseThreshold(threshold)
			if err == nil && limit == 0 {
				err = fmt.Errorf("%q would mark every wobble: give a percentage above 0, e.g. 10%%", threshold)
			}
			if err != nil {
				return usagef("--threshold: %v", err)
			}
			pub, err := render.Publish(render.PublishOptions{Dirs: args, Out: out, Threshold: limit})
			if errors.Is(err, render.ErrPublishUsage) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			for _, s := range pub.Skipped {
				fmt.Fprintln(os.Stderr, "bench: publish: skipped:", s)
			}
			fmt.Fprintf(c.OutOrStdout(), "published %d benchmark and %d conformance runs, %d trend pages (one per workload with a recurring cell): %s\n",
				pub.Benchmarks, pub.Conforms, len(pub.Trends), pub.Index)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory that receives the site (required)")
	cmd.Flags().StringVar(&threshold, "threshold", "10%", `smallest change a trend marks as a change point, as a percentage ("10%" or "10")`)
	return cmd
}
