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

const calibrateDBLong = `Runs, interleaved and --rounds times, side-by-side comparisons per strategy:

  pgbench  a 'bench run --brokers none' cell against pgbench running the
           strategy's twin: its own statements, transactions and round trips,
           clients = the workload's consumers, the same aggregates, fresh
           events (goal: none >= 95% of pgbench). Both sides run without the
           audit log unless --audit names one.
  pgx      the same none cell against the twin's statements sent by a bare
           pgx loop in this process: same driver, same transactions and
           round trips, nothing else (goal: none >= 95% of the loop). It
           splits the pgbench gap: the harness's own cost (none / loop) and
           what Go and pgx cost against pgbench's libpq (the two ratios'
           quotient).
  audit    the same none cell with the audit log bench run installs by
           default and without it (goal: >= 97%).
  prefill  the none cell with the workload's inbox_prefill against the same
           cell on an empty inbox (a measurement: throughput and p99).
  prune    the prefilled cell with the workload's retention running beside
           it (inbox_prune_every, inbox_prune_keep) against without.

pgbench, pgx and audit run the workload without its prefill; pgbench and
pgx asked together share one none cell per round; prefill and prune
need a workload that sets it (workloads/inbox-10m.yaml). With both, each
round measures three cells: empty, prefilled, prefilled with retention.

Every comparison alternates which side runs first from round to round, its
two sides next to each other in time. Each cell's event count is sized from a
short pilot cell to last about the workload's warm-up plus --duration. Prints
each measurement as it is taken (events/s, and the CPU per event of each side
when PostgreSQL runs on this host), then each median ratio with its confidence
interval (with fewer than 6 rounds the rounds' range, at the level printed) and
each goal as met (the interval's lower bound reaches it), not met (its upper
bound stays below) or undecided; one round is judged by its value. Exit 1 if a
goal is not met.`

// calibrateDBFlags are the flags of 'bench calibrate-db'.
type calibrateDBFlags struct {
	workload, strategies, compare, audit, abAudit, out string
	rounds                                             int
	dur, interval                                      time.Duration
	partitioned                                        bool
}

func (fl *calibrateDBFlags) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&fl.workload, "workload", "calibrate", "workload file, or the name of one in workloads/ (fresh increments, uniform keys, no faults)")
	f.StringVar(&fl.strategies, "strategies", strings.Join(dbcalib.Twins(), ","), "comma-separated strategies (the pgbench and pgx comparisons know "+strings.Join(dbcalib.Twins(), " and ")+")")
	f.StringVar(&fl.compare, "compare", dbcalib.ComparePGBench+","+dbcalib.ComparePGX+","+dbcalib.CompareAudit, "comparisons to make: "+strings.Join(dbcalib.Comparisons, ", "))
	f.IntVar(&fl.rounds, "rounds", 3, "times each comparison is measured, interleaved")
	f.DurationVar(&fl.dur, "duration", 20*time.Second, "measured time of each pgbench run, pgx loop and none cell, after the workload's warm-up")
	f.StringVar(&fl.audit, "audit", string(inbox.AuditOff), "audit log on every side of the pgbench and pgx comparisons: off, auto, wal, statement, row")
	f.StringVar(&fl.abAudit, "ab-audit", string(inbox.AuditAuto), "audit log the audit comparison measures: auto (bench run's default), wal, statement or row")
	f.BoolVar(&fl.partitioned, "partitioned-inbox", false, "run the none cells on the inbox partitioned by event time")
	f.DurationVar(&fl.interval, "partition-interval", 24*time.Hour, "event-time range of one inbox partition, with --partitioned-inbox")
	f.StringVar(&fl.out, "json", "", "also write the report (every sample, the pgbench command lines and scripts) to this file")
}

// options turns the flags into dbcalib options, checked.
func (fl *calibrateDBFlags) options(c *cobra.Command, cfg *config.Config) (dbcalib.Options, error) {
	o := dbcalib.Options{Cfg: *cfg, Strategies: config.SplitList(fl.strategies), Compare: config.SplitList(fl.compare),
		Rounds: fl.rounds, Measure: fl.dur, Progress: os.Stderr, InboxLayout: inbox.Layout{Partitioned: fl.partitioned, Interval: fl.interval}}
	var err error
	if o.Spec, err = workload.Load(fl.workload); err != nil {
		return o, usageError{err}
	}
	if c.Flags().Changed("partition-interval") && !fl.partitioned {
		return o, usagef("--partition-interval needs --partitioned-inbox")
	}
	if o.Audit, err = inbox.ParseAuditMode(fl.audit); err != nil {
		return o, usagef("--audit: %v", err)
	}
	if o.ABMode, err = inbox.ParseAuditMode(fl.abAudit); err != nil || o.ABMode == inbox.AuditOff {
		return o, usagef("--ab-audit %q: accepted values are auto, wal, statement, row", fl.abAudit)
	}
	if err := o.Validate(); err != nil {
		return o, usageError{err}
	}
	return o, nil
}

// newCalibrateDBCmd is `bench calibrate-db`: package dbcalib behind flags.
func newCalibrateDBCmd(cfg *config.Config) *cobra.Command {
	var fl calibrateDBFlags
	cmd := &cobra.Command{
		Use:   "calibrate-db",
		Short: "Measure the database path: the none baseline against pgbench on the same SQL, the audit's cost, the inbox at size",
		Long:  calibrateDBLong,
		Example: `  bench calibrate-db
  bench calibrate-db --compare audit --strategies batch --rounds 5
  bench calibrate-db --compare pgbench --json calibrate-db.json
  bench calibrate-db --workload inbox-10m --compare prefill,prune --rounds 2 --partitioned-inbox`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o, err := fl.options(c, cfg)
			if err != nil {
				return err
			}
			if _, _, err := checkServices(c.Context(), cfg, nil); err != nil {
				return err
			}
			rep, err := dbcalib.Run(c.Context(), o)
			if rep != nil {
				rep.WriteSummary(os.Stdout)
				if fl.out != "" {
					if werr := rep.WriteJSON(fl.out); werr != nil {
						return werr
					}
					fmt.Println("report:", fl.out)
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
	fl.bind(cmd)
	return cmd
}
