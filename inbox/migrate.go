package inbox

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// partitionedSQL turns the inbox of migration 0001 into the partitioned
// layout. It is not a numbered migration: it runs only in a schema being
// created, right after 0001, when the partitioned layout is asked for.
//
//go:embed partitioned.sql
var partitionedSQL string

// DefaultSchema is where the inbox lives unless a run asks for another one.
const DefaultSchema = "inboxbench"

// DB is the part of a pool or connection that migrations, retention and
// statistics need; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Migration is one embedded schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order. File names
// are NNNN_name.sql; a malformed name is a build mistake, hence the panic.
func Migrations() []Migration {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic(fmt.Sprintf("inbox: embedded migrations: %v", err))
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			panic(fmt.Sprintf("inbox: migration file %q: want NNNN_name.sql", name))
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", name))
		if err != nil {
			panic(fmt.Sprintf("inbox: read migration %s: %v", name, err))
		}
		ms = append(ms, Migration{Version: v, Name: rest, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms
}

// ValidateSchema checks a schema name before it is quoted into SQL.
func ValidateSchema(schema string) error {
	switch {
	case schema == "":
		return errors.New("inbox: schema name is empty")
	case len(schema) > 63:
		return fmt.Errorf("inbox: schema name %q is longer than PostgreSQL's 63-byte identifier limit", schema)
	}
	for i, r := range schema {
		// Names are quoted into SQL, and into a regclass literal for Stats:
		// keeping them to identifier characters rules out any injection.
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return fmt.Errorf("inbox: schema name %q: use letters, digits and underscores, not starting with a digit", schema)
		}
	}
	return nil
}

// Layout is the shape of the inbox table, chosen when a schema is created.
// The zero value is the plain layout.
type Layout struct {
	// Partitioned makes inbox PARTITION BY RANGE (event_time) with primary
	// key (consumer, source, event_id, event_time), so retention drops
	// whole partitions instead of deleting rows (see DropPartitions). It
	// relies on the producer sending the same CloudEvents time with every
	// copy of an event, and refuses events without a time.
	Partitioned bool
	// Interval is the event-time range of one partition (default 24h; from
	// one minute to 366 days, in whole minutes). It is fixed when the
	// schema is created; zero on an existing schema keeps its interval.
	Interval time.Duration
	// Ahead is how many partitions after the current one are created
	// (default 7), so that inserts rarely have to create one.
	Ahead int
}

// DefaultPartitionInterval and DefaultPartitionsAhead are the Layout
// defaults.
const (
	DefaultPartitionInterval = 24 * time.Hour
	DefaultPartitionsAhead   = 7
)

// Migrate creates schema if needed and applies the embedded migrations it
// has not seen yet, all in one transaction, and returns the versions it
// applied (none when the schema is current). It is idempotent and safe to
// run concurrently: an advisory lock per schema serialises migrators. A new
// schema gets the plain layout; an existing one keeps its layout.
func Migrate(ctx context.Context, db DB, schema string) (applied []int, err error) {
	return MigrateLayout(ctx, db, schema, Layout{})
}

// MigrateLayout is Migrate choosing the layout of a new schema. With
// layout.Partitioned it also creates the current partition and
// layout.Ahead more; on an existing schema it refuses a plain inbox (its
// rows carry no usable event time) or a different interval.
func MigrateLayout(ctx context.Context, db DB, schema string, layout Layout) (applied []int, err error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	if layout.Partitioned {
		if layout.Interval != 0 {
			if err := ValidatePartitionInterval(layout.Interval); err != nil {
				return nil, err
			}
		}
		if layout.Ahead < 0 {
			return nil, fmt.Errorf("inbox: partitions ahead %d must not be negative", layout.Ahead)
		}
	}
	q := pgx.Identifier{schema}.Sanitize()
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: migrate schema %s: begin: %w", schema, err)
	}
	defer func() {
		if err != nil {
			err = rollback(ctx, tx, err)
		}
	}()
	// CREATE SCHEMA IF NOT EXISTS itself races (unique violation on the
	// catalog), so take the lock before it.
	if _, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('inboxbench-migrate:' || $1))", schema); err != nil {
		return nil, fmt.Errorf("inbox: migrate schema %s: lock: %w", schema, err)
	}
	if _, err = tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
		return nil, fmt.Errorf("inbox: migrate schema %s: create schema (the role needs CREATE on the database): %w", schema, err)
	}
	if _, err = tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q+`.schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("inbox: migrate schema %s: schema_migrations: %w", schema, err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+q+".schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("inbox: migrate schema %s: read versions: %w", schema, err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("inbox: migrate schema %s: read versions: %w", schema, err)
	}
	have := map[int]bool{}
	for _, v := range done {
		have[int(v)] = true
	}
	for _, m := range Migrations() {
		if have[m.Version] {
			continue
		}
		if _, err = tx.Exec(ctx, strings.ReplaceAll(m.SQL, "@schema@", q)); err != nil {
			return nil, fmt.Errorf("inbox: migrate schema %s: migration %04d_%s: %w", schema, m.Version, m.Name, err)
		}
		if _, err = tx.Exec(ctx, "INSERT INTO "+q+".schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("inbox: migrate schema %s: record migration %d: %w", schema, m.Version, err)
		}
		applied = append(applied, m.Version)
		if m.Version == 1 && layout.Partitioned {
			// Later migrations must then hold for both layouts: alter the
			// inbox (the change reaches every partition), never recreate it.
			iv := cmp.Or(layout.Interval, DefaultPartitionInterval)
			r := strings.NewReplacer("@schema@", q, "@interval@", strconv.FormatInt(int64(iv/time.Second), 10))
			if _, err = tx.Exec(ctx, r.Replace(partitionedSQL)); err != nil {
				return nil, fmt.Errorf("inbox: migrate schema %s: partitioned inbox: %w", schema, err)
			}
		}
	}
	if layout.Partitioned {
		if err = preparePartitioned(ctx, tx, schema, layout); err != nil {
			return nil, err
		}
	}
	if err = tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("inbox: migrate schema %s: commit: %w", schema, err)
	}
	return applied, nil
}

// preparePartitioned checks that schema's inbox is partitioned as layout
// asks and creates the current partition and the ones ahead.
func preparePartitioned(ctx context.Context, tx pgx.Tx, schema string, layout Layout) error {
	p, ok, err := ReadPartitioning(ctx, tx, schema)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("inbox: schema %s already has a plain (unpartitioned) inbox: the partitioned layout is chosen when a schema is created; migrate a new schema", schema)
	case layout.Interval != 0 && layout.Interval != p.Interval:
		return fmt.Errorf("inbox: schema %s is partitioned by %v, not %v: the interval is fixed when the schema is created", schema, p.Interval, layout.Interval)
	}
	_, err = createAhead(ctx, tx, schema, time.Duration(cmp.Or(layout.Ahead, DefaultPartitionsAhead))*p.Interval)
	return err
}

// EnsureAccountTable creates another business table shaped like account in
// schema. A second consumer with its own responsibility (audit next to
// inventory) gets its own target table, as the article advises for
// projections; point Options.AccountTable at it.
func EnsureAccountTable(ctx context.Context, db DB, schema, table string) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	if table == "" {
		return errors.New("inbox: account table name is empty")
	}
	_, err := db.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+pgx.Identifier{schema, table}.Sanitize()+
		" (LIKE "+pgx.Identifier{schema, "account"}.Sanitize()+" INCLUDING ALL)")
	if err != nil {
		return fmt.Errorf("inbox: create account table %s.%s (run migrate first): %w", schema, table, err)
	}
	return nil
}

// DropSchema removes schema and everything in it (fresh-schema-per-cell
// runs and tests clean up with it).
func DropSchema(ctx context.Context, db DB, schema string) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("inbox: drop schema %s: %w", schema, err)
	}
	return nil
}

// Checkpoint runs CHECKPOINT, so that what is measured next starts right
// after one: every measurement then writes the same full-page images
// into the WAL, and none is slowed by a checkpoint that what ran before
// made due (a cell at 60k events/s writes ~300 MB of WAL; with
// max_wal_size at its default of 1 GB, a checkpoint landed in about every
// third cell, and the second of two cells in a run came out ~10% slower).
// allowed is false when the role may not (PostgreSQL 15: GRANT
// pg_checkpoint TO it).
func Checkpoint(ctx context.Context, db DB) (allowed bool, err error) {
	_, err = db.Exec(ctx, "CHECKPOINT")
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42501" {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("inbox: checkpoint: %w", err)
	}
	return true, nil
}

// Checkpoints is how many checkpoints the server has started since its
// statistics were last reset, timed and requested (pg_stat_checkpointer
// from PostgreSQL 17, pg_stat_bgwriter before). Two readings bracket what
// ran between them.
func Checkpoints(ctx context.Context, db DB) (int64, error) {
	var version int
	if err := db.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return 0, fmt.Errorf("inbox: server version: %w", err)
	}
	q := "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
	if version >= 170000 {
		q = "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
	}
	var n int64
	if err := db.QueryRow(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("inbox: checkpoint statistics: %w", err)
	}
	return n, nil
}

// Retire turns autovacuum off for every table of a schema whose run is
// over. Its tables are kept for the reader of the results, not written
// again: vacuuming and analysing their last rows would only take CPU from
// whatever runs next (on 2 cores, the next cell's throughput moved by
// ±10% with where autovacuum's naptime happened to fall).
func Retire(ctx context.Context, db DB, schema string) error {
	return eachTable(ctx, db, schema, "retire", func(t string) string { return "ALTER TABLE " + t + " SET (autovacuum_enabled = false)" })
}

// Analyze gathers planner statistics for every table of a schema. A cell
// starts on empty tables that were never analysed, and until autovacuum
// first visits them (autovacuum_naptime, a minute by default) the planner
// guesses: measured on the batch.sql example, it estimated 0.5% of the
// inbox to belong to the consumer (all of it does) and checked a batch's
// redeliveries against a hash of the consumer's whole inbox, rebuilt for
// every batch; the cell's rate fell with the inbox's size, from 60k to 1k
// events/s, in the cells autovacuum reached late. No production inbox
// runs without statistics; the runner analyses a steady cell's tables
// early in its warm-up (runner/steady.go).
func Analyze(ctx context.Context, db DB, schema string) error {
	return eachTable(ctx, db, schema, "analyze", func(t string) string { return "ANALYZE " + t })
}

// eachTable runs the statement stmt gives for each table of schema.
func eachTable(ctx context.Context, db DB, schema, what string, stmt func(table string) string) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	rows, err := db.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, schema)
	if err != nil {
		return fmt.Errorf("inbox: %s schema %s: %w", what, schema, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("inbox: %s schema %s: %w", what, schema, err)
	}
	for _, t := range tables {
		if _, err := db.Exec(ctx, stmt(t)); err != nil {
			return fmt.Errorf("inbox: %s schema %s: table %s: %w", what, schema, t, err)
		}
	}
	return nil
}

// Clear empties the tables a cell writes, between parts of a cell judged
// one at a time (a rate search's steps), so that every part starts from
// the same tables: accounts, parked events, idempotency keys, the
// external operations and the outbox, the audit log when there is one
// (audited; its sentinel row stays) and, unless
// keepInbox (the inbox holds prefilled history), the inbox.
func Clear(ctx context.Context, db DB, schema string, keepInbox, audited bool) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	q := pgx.Identifier{schema}.Sanitize()
	tables := q + ".account, " + q + ".parked, " + q + ".idempotency, " + q + ".external_op, " + q + ".outbox"
	if !keepInbox {
		tables += ", " + q + ".inbox"
	}
	sql := "TRUNCATE " + tables
	if audited {
		sql += ", " + q + ".account_audit; INSERT INTO " + q + ".account_audit VALUES (0, '', 0, 0)"
	}
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("inbox: clear the tables of %s: %w", schema, err)
	}
	return nil
}
