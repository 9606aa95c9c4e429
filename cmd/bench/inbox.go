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
longer than every replay window.`,
	}
	cmd.PersistentFlags().StringVar(&schema, "schema", inbox.DefaultSchema, "schema that holds the inbox tables")
	pool := func(c *cobra.Command) (*pgxpool.Pool, error) {
		p, err := pgxpool.New(c.Context(), cfg.PGURL)
		if err != nil {
			return nil, usagef("postgres URL %q: %v", cfg.PGURL, err)
		}
		if err := p.Ping(c.Context()); err != nil {
			p.Close()
			return nil, fmt.Errorf("postgres at %s is not reachable: %w (start it with 'bench stack up postgres' or set INBOXBENCH_PG_URL)", redact(cfg.PGURL), err)
		}
		return p, nil
	}
	migrate := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the inbox schema (runs do this automatically)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := pool(c)
			if err != nil {
				return err
			}
			defer p.Close()
			applied, err := inbox.Migrate(c.Context(), p, schema)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Printf("schema %s is up to date\n", schema)
			} else {
				fmt.Printf("schema %s: applied migrations %v\n", schema, applied)
			}
			return nil
		},
	}
	var olderThan string
	var batch int
	prune := &cobra.Command{
		Use:   "prune --older-than DURATION",
		Short: "Delete inbox rows older than DURATION in bounded batches, each in its own transaction",
		Long: `Deletes inbox rows whose applied_at is older than DURATION (e.g. 168h, 7d, 90d),
batch by batch, each batch in its own short transaction so the delete never
holds locks or bloats one huge transaction. Prints how many rows it removed.
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
			n, err := inbox.Prune(c.Context(), p, schema, d, batch)
			if err != nil {
				return err
			}
			fmt.Printf("pruned %d inbox rows older than %s from schema %s in %s\n", n, olderThan, schema, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	prune.Flags().StringVar(&olderThan, "older-than", "", "age bound: rows applied before now minus this are deleted (e.g. 72h, 7d)")
	prune.Flags().IntVar(&batch, "batch", 5000, "rows deleted per transaction")
	stats := &cobra.Command{
		Use:   "stats",
		Short: "Show inbox rows, size on disk, oldest row, parked events and idempotency keys",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := pool(c)
			if err != nil {
				return err
			}
			defer p.Close()
			s, err := inbox.ReadStats(c.Context(), p, schema)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "schema\t%s\n", s.Schema)
			fmt.Fprintf(tw, "inbox rows\t%d\n", s.Rows)
			fmt.Fprintf(tw, "size\t%s\n", humanBytes(s.SizeBytes))
			fmt.Fprintf(tw, "oldest row\t%s\n", age(s.Oldest))
			fmt.Fprintf(tw, "parked events\t%d\n", s.Parked)
			fmt.Fprintf(tw, "oldest parked\t%s\n", age(s.OldestParked))
			fmt.Fprintf(tw, "idempotency keys\t%d\n", s.IdempotencyKeys)
			return tw.Flush()
		},
	}
	strategies := &cobra.Command{
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
	cmd.AddCommand(migrate, prune, stats, strategies)
	return cmd
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

// redact hides a password in a connection URL for messages.
func redact(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.Index(u[i+3:], "@"); j >= 0 {
			creds := u[i+3 : i+3+j]
			if k := strings.Index(creds, ":"); k >= 0 {
				return u[:i+3] + creds[:k] + ":***" + u[i+3+j:]
			}
		}
	}
	return u
}
