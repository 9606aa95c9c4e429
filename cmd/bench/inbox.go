package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
)

func newInboxCmd(cfg *config.Config) *cobra.Command {
	var schema string
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Manage the PostgreSQL inbox: migrate, prune, stats, strategies",
		Long: `The inbox is one table keyed by (consumer, source, event id) whose row commits in
the same transaction as the business change. These commands manage it in the
database named by --pg-url / INBOXBENCH_PG_URL.

Retention rule (from the article): the inbox must keep a row for as long as the
same event can arrive again: upstream replays, retries, disaster recovery,
manual resends. If the broker can replay a year-old event and the inbox keeps
7 days, restoring an old offset applies old changes again. Choose --older-than
longer than every replay window.

'migrate --partitioned' creates a new schema whose inbox is partitioned by the
event's own time (CloudEvents time, the same on every copy of an event); prune
then drops whole old partitions, and an event whose partition was dropped is
refused instead of applied again.`,
	}
	cmd.PersistentFlags().StringVar(&schema, "schema", inbox.DefaultSchema, "schema that holds the inbox tables")
	pool := func(c *cobra.Command) (*pgxpool.Pool, error) {
		p, err := pgxpool.New(c.Context(), cfg.PGURL)
		if err != nil {
			return nil, usagef("postgres URL %q: %v", config.Redact(cfg.PGURL), err)
		}
		if err := p.Ping(c.Context()); err != nil {
			p.Close()
			return nil, fmt.Errorf("postgres at %s is not reachable: %w (start it with 'bench stack up postgres' or set INBOXBENCH_PG_URL)", config.Redact(cfg.PGURL), err)
		}
		return p, nil
	}
	cmd.AddCommand(newMigrateCmd(&schema, pool), newPruneCmd(&schema, pool), newStatsCmd(&schema, pool), newStrategiesCmd())
	return cmd
}

// openPool connects to the configured PostgreSQL for an inbox subcommand.
type openPool func(c *cobra.Command) (*pgxpool.Pool, error)

func newMigrateCmd(schema *string, pool openPool) *cobra.Command {
	var partitioned bool
	var interval string
	var ahead int
	migrate := &cobra.Command{
		Use:   "migrate [--partitioned [--partition-interval D] [--partitions-ahead N]]",
		Short: "Create or upgrade the inbox schema (runs do this automatically)",
		Long: `Creates the schema if needed and applies the migrations it has not seen.

--partitioned chooses, for a NEW schema, an inbox partitioned by event time
(PARTITION BY RANGE (event_time), primary key (consumer, source, event_id,
event_time)). Its dedup relies on the producer sending the same CloudEvents time
with every copy of an event: a copy with another time is another key. Events
without a time are refused. Partitions are created ahead (and on demand), and
'bench inbox prune' drops whole partitions older than its bound. On an existing
partitioned schema it creates the partitions ahead; an existing plain schema
cannot be partitioned.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			layout := inbox.Layout{Partitioned: partitioned, Ahead: ahead}
			for _, f := range []string{"partition-interval", "partitions-ahead"} {
				if c.Flags().Changed(f) && !partitioned {
					return usagef("--%s needs --partitioned", f)
				}
			}
			if interval != "" {
				d, err := parseAge(interval)
				if err == nil {
					err = inbox.ValidatePartitionInterval(d)
				}
				if err != nil {
					return usagef("--partition-interval %q: %v", interval, err)
				}
				layout.Interval = d
			}
			if ahead < 1 {
				return usagef("--partitions-ahead %d: must be at least 1", ahead)
			}
			p, err := pool(c)
			if err != nil {
				return err
			}
			defer p.Close()
			applied, err := inbox.MigrateLayout(c.Context(), p, *schema, layout)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Printf("schema %s is up to date\n", *schema)
			} else {
				fmt.Printf("schema %s: applied migrations %v\n", *schema, applied)
			}
			if partitioned {
				s, err := inbox.ReadStats(c.Context(), p, *schema)
				if err != nil {
					return err
				}
				fmt.Printf("inbox partitioned by event time: %d partitions of %s, %s to %s\n", s.Partitions, shortDuration(s.PartitionInterval),
					s.PartitionsFrom.Format(time.RFC3339), s.PartitionsTo.Format(time.RFC3339))
			}
			return nil
		},
	}
	migrate.Flags().BoolVar(&partitioned, "partitioned", false, "create the inbox partitioned by event time (new schemas only)")
	migrate.Flags().StringVar(&interval, "partition-interval", "", "event-time range of one partition, whole minutes from 1m to 366d (e.g. 1h, 24h, 7d; default 24h, fixed at creation)")
	migrate.Flags().IntVar(&ahead, "partitions-ahead", inbox.DefaultPartitionsAhead, "partitions to create after the current one (more are made on demand)")
	return migrate
}

func newPruneCmd(schema *string, pool openPool) *cobra.Command {
	var olderThan string
	var batch int
	prune := &cobra.Command{
		Use:   "prune --older-than DURATION",
		Short: "Delete inbox rows older than DURATION in bounded batches, or drop old partitions",
		Long: `Deletes inbox rows whose applied_at is older than DURATION (e.g. 168h, 7d, 90d),
batch by batch, each batch in its own short transaction so the delete never
holds locks or bloats one huge transaction. Prints how many rows it removed.

On a partitioned inbox it drops every partition whose whole event-time range is
older than DURATION (--batch does not apply), lists what it dropped, and creates
the partitions ahead. Events of a dropped range are refused from then on.

Keep DURATION longer than every window in which an event can be delivered again.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if olderThan == "" {
				return usagef("--older-than is required (e.g. --older-than 7d): choose it longer than every replay window")
			}
			d, err := parseAge(olderThan)
			if err != nil {
				return usagef("--older-than %q: %v", olderThan, err)
			}
			if batch < 1 {
				return usagef("--batch %d: must be at least 1", batch)
			}
			p, err := pool(c)
			if err != nil {
				return err
			}
			defer p.Close()
			start := time.Now()
			r, err := inbox.ApplyRetention(c.Context(), p, *schema, d, batch)
			if err != nil {
				return err
			}
			took := time.Since(start).Round(time.Millisecond)
			if !r.Partitioned {
				fmt.Printf("pruned %d inbox rows older than %s from schema %s in %s\n", r.Rows, olderThan, *schema, took)
				return nil
			}
			fmt.Printf("dropped %d partitions (%d inbox rows) older than %s from schema %s in %s\n", len(r.Dropped), r.Rows, olderThan, *schema, took)
			for _, pt := range r.Dropped {
				fmt.Printf("  dropped %s  %s to %s  %d rows\n", pt.Name, pt.From.Format(time.RFC3339), pt.To.Format(time.RFC3339), pt.Rows)
			}
			for _, pt := range r.Created {
				fmt.Printf("  created %s  %s to %s\n", pt.Name, pt.From.Format(time.RFC3339), pt.To.Format(time.RFC3339))
			}
			return nil
		},
	}
	prune.Flags().StringVar(&olderThan, "older-than", "", "age bound: rows applied before now minus this are deleted (e.g. 72h, 7d)")
	prune.Flags().IntVar(&batch, "batch", 5000, "rows deleted per transaction (plain inbox)")
	return prune
}

func newStatsCmd(schema *string, pool openPool) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Show inbox rows, size on disk, oldest row, partitions, parked events and idempotency keys",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := pool(c)
			if err != nil {
				return err
			}
			defer p.Close()
			s, err := inbox.ReadStats(c.Context(), p, *schema)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "schema\t%s\n", s.Schema)
			fmt.Fprintf(tw, "inbox rows\t%d\n", s.Rows)
			fmt.Fprintf(tw, "size\t%s\n", humanBytes(s.SizeBytes))
			fmt.Fprintf(tw, "oldest row\t%s\n", age(s.Oldest))
			if s.Partitioned {
				fmt.Fprintf(tw, "layout\tpartitioned by event time, %s per partition\n", shortDuration(s.PartitionInterval))
				span := "-"
				if s.Partitions > 0 {
					span = s.PartitionsFrom.Format(time.RFC3339) + " to " + s.PartitionsTo.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "partitions\t%d (%s)\n", s.Partitions, span)
				horizon := "- (nothing dropped yet)"
				if !s.Horizon.IsZero() {
					horizon = s.Horizon.Format(time.RFC3339) + " (older events are refused)"
				}
				fmt.Fprintf(tw, "retention horizon\t%s\n", horizon)
			} else {
				fmt.Fprintf(tw, "layout\tplain\n")
			}
			fmt.Fprintf(tw, "parked events\t%d\n", s.Parked)
			fmt.Fprintf(tw, "oldest parked\t%s\n", age(s.OldestParked))
			fmt.Fprintf(tw, "idempotency keys\t%d\n", s.IdempotencyKeys)
			return tw.Flush()
		},
	}
}

func newStrategiesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "strategies",
		Short: "List the inbox strategies (negative controls are marked broken)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STRATEGY\tDESCRIPTION")
			for _, s := range inbox.Strategies() {
				fmt.Fprintf(tw, "%s\t%s\n", inbox.Label(s), s.Description())
			}
			return tw.Flush()
		},
	}
}

// parseAge accepts Go durations plus a day suffix ("7d").
func parseAge(s string) (time.Duration, error) {
	if strings.HasSuffix(s, "d") {
		n, err := strconv.ParseFloat(strings.TrimSuffix(s, "d"), 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("write a positive number of days (7d) or a duration (168h)")
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("write a positive duration such as 168h or 7d")
	}
	return d, nil
}

// shortDuration prints 24h rather than 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", t.Format(time.RFC3339), time.Since(t).Round(time.Second))
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
