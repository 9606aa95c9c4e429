package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/dbcalib"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/workload"
)

// newCalibrateDBCmd is `bench calibrate-db`: package dbcalib behind flags.
func newCalibrateDBCmd(cfg *config.Config) *cobra.Command {
	var (
		wl, strategies, compare, audit, abAudit, out string
		rounds                                       int
		dur, interval                                time.Duration
		partitioned                                  bool
	)
	cmd := &cobra.Command{
		Use:   "calibrate-db",
		Short: "Measure the database path: the none baseline against pgbench on the same SQL, and what the audit log costs",
		Long: `Runs, interleaved and --rounds times, two side-by-side comparisons per strategy:

  pgbench  a 'bench run --brokers none' cell against pgbench running the
           strategy's twin: its own statements, transactions and round trips,
           clients = the workload's consumers, the same aggregates, fresh
           events (goal: none >= 95% of pgbench). Both sides run without the
           audit log unless --audit names one.
  audit    the same none cell with the audit log bench run installs by
           default and without it (goal: >= 97%).
  prefill  the none cell with the workload's inbox_prefill against the same
           cell on an empty inbox (a measurement: throughput and p99).
  prune    the prefilled cell with the workload's retention running beside
           it (inbox_prune_every, inbox_prune_keep) against without.

pgbench and audit run the workload without its prefill; prefill and prune
need a workload that sets it (workloads/inbox-10m.yaml). With both, each
round measures three cells: empty, prefilled, prefilled with retention.

Each cell's event count is sized from a short pilot cell to last about the
workload's warm-up plus --duration. Prints each measurement as it is taken,
then the median ratio with its range; exit 1 if a goal is not met.`,
		Example: `  bench calibrate-db
  bench calibrate-db --compare audit --strategies batch --rounds 5
  bench calibrate-db --compare pgbench --json calibrate.json
  bench calibrate-db --workload inbox-10m --compare prefill,prune --rounds 2 --partitioned-inbox`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			spec, err := workload.Load(wl)
			if err != nil {
				return usageError{err}
			}
			if c.Flags().Changed("partition-interval") && !partitioned {
				return usagef("--partition-interval needs --partitioned-inbox")
			}
			o := dbcalib.Options{Cfg: *cfg, Spec: spec, Strategies: splitList(strategies), Compare: splitList(compare),
				Rounds: rounds, Measure: dur, Progress: os.Stderr, InboxLayout: inbox.Layout{Partitioned: partitioned, Interval: interval}}
			if o.Audit, err = inbox.ParseAuditMode(audit); err != nil {
				return usagef("--audit: %v", err)
			}
			if o.ABMode, err = inbox.ParseAuditMode(abAudit); err != nil || o.ABMode == inbox.AuditOff {
				return usagef("--ab-audit %q: accepted values are auto, wal, statement, row", abAudit)
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			if _, err := checkServices(c.Context(), cfg, nil); err != nil {
				return err
			}
			rep, err := dbcalib.Run(c.Context(), o)
			if rep != nil {
				rep.WriteSummary(os.Stdout)
				if out != "" {
					if werr := rep.WriteJSON(out); werr != nil {
						return werr
					}
					fmt.Println("report:", out)
				}
			}
			if err != nil {
				return err
			}
			if !rep.Met() {
				return failure{"a calibration goal was not met: " + rep.String()}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&wl, "workload", "calibrate", "workload file, or the name of one in workloads/ (fresh increments, uniform keys, no faults)")
	f.StringVar(&strategies, "strategies", strings.Join(dbcalib.Twins, ","), "comma-separated strategies (the pgbench comparison knows tx and batch)")
	f.StringVar(&compare, "compare", dbcalib.ComparePGBench+","+dbcalib.CompareAudit, "comparisons to make: "+strings.Join(dbcalib.Comparisons, ", "))
	f.IntVar(&rounds, "rounds", 3, "times each comparison is measured, interleaved")
	f.DurationVar(&dur, "duration", 20*time.Second, "measured time of each pgbench run and none cell, after the workload's warm-up")
	f.StringVar(&audit, "audit", string(inbox.AuditOff), "audit log on both sides of the pgbench comparison: off, auto, wal, statement, row")
	f.StringVar(&abAudit, "ab-audit", string(inbox.AuditAuto), "audit log the audit comparison measures: auto (bench run's default), wal, statement or row")
	f.BoolVar(&partitioned, "partitioned-inbox", false, "run the none cells on the inbox partitioned by event time")
	f.DurationVar(&interval, "partition-interval", 24*time.Hour, "event-time range of one inbox partition, with --partitioned-inbox")
	f.StringVar(&out, "json", "", "also write the report (every sample, the pgbench command lines and scripts) to this file")
	return cmd
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
