package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The time-partitioned inbox (MigrateLayout with Layout.Partitioned).
// Partitions are ranges of the event's own time, aligned to multiples of
// the interval since the Unix epoch, and there is no DEFAULT partition:
// rows parked in a default partition could never be dropped with a
// partition, and a default partition holding rows of a range blocks
// creating that range's partition later. Instead an insert that finds no
// partition is retried after creating it, unless its time is before the
// retention horizon: then its partition was dropped, the inbox no longer
// knows whether the event took effect, and it is refused
// (ErrBeyondRetention) rather than applied again. The plain layout cannot
// tell a forgotten event from a new one; this one can.
//
// Partitions are created with CREATE TABLE and ALTER TABLE … ATTACH
// PARTITION, which locks the parent only in SHARE UPDATE EXCLUSIVE mode
// (CREATE TABLE … PARTITION OF would take ACCESS EXCLUSIVE): creating one
// on demand does not stall the deliveries in flight. Dropping a partition
// takes the parent's ACCESS EXCLUSIVE lock for a moment, bounded by a lock
// timeout and retried.

// ErrBeyondRetention marks an event whose time is before the retention
// horizon of a partitioned inbox: the partition that would have held its
// inbox row was dropped. Nothing is written; the event must not be acked
// as applied, and only a person can decide what to do with it.
var ErrBeyondRetention = errors.New("event time is before the inbox's retention horizon")

// Partitioning describes a partitioned inbox.
type Partitioning struct {
	Interval time.Duration
	// Horizon is the end of the newest partition ever dropped: events with
	// an earlier time are refused with ErrBeyondRetention. Zero until the
	// first drop.
	Horizon time.Time
}

// Partition is one range partition of the inbox: event times [From, To).
type Partition struct {
	Name     string
	From, To time.Time // zero when the bound is not a plain time range (a partition not made by this package)
	// Rows is set by DropPartitions: the rows dropped with the partition,
	// counted just before the drop.
	Rows int64
}

// maxCreate bounds the partitions one call creates, so a wild event time
// or a typo cannot create thousands of tables.
const maxCreate = 1000

// dropLockTimeout bounds the wait for the inbox's ACCESS EXCLUSIVE lock
// when dropping partitions; inserts queue behind that wait.
const dropLockTimeout = "2s"

// ValidatePartitionInterval checks a Layout.Interval.
func ValidatePartitionInterval(d time.Duration) error {
	if d < time.Minute || d > 366*24*time.Hour || d%time.Minute != 0 {
		return fmt.Errorf("inbox: partition interval %v: want whole minutes from 1m to 366 days (e.g. 1h, 24h, 168h)", d)
	}
	return nil
}

// partitionStart is the start of the partition holding t.
func partitionStart(t time.Time, iv time.Duration) time.Time {
	s, u := int64(iv/time.Second), t.Unix()
	f := u / s * s
	if u < f {
		f -= s
	}
	return time.Unix(f, 0).UTC()
}

// partitionName names a partition after its start, e.g. inbox_p20260101
// (daily) or inbox_p20260101_1500.
func partitionName(start time.Time, iv time.Duration) string {
	if iv%(24*time.Hour) == 0 {
		return "inbox_p" + start.Format("20060102")
	}
	return "inbox_p" + start.Format("20060102_1504")
}

// ReadPartitioning reports whether schema's inbox is partitioned and how.
func ReadPartitioning(ctx context.Context, db DB, schema string) (Partitioning, bool, error) {
	if err := ValidateSchema(schema); err != nil {
		return Partitioning{}, false, err
	}
	q := pgx.Identifier{schema}.Sanitize()
	var kind *string
	if err := db.QueryRow(ctx, "SELECT (SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1))", q+".inbox").Scan(&kind); err != nil {
		return Partitioning{}, false, fmt.Errorf("inbox: layout of %s: %w", schema, err)
	}
	switch {
	case kind == nil:
		return Partitioning{}, false, fmt.Errorf("inbox: schema %s has no inbox table: run migrate first", schema)
	case *kind != "p":
		return Partitioning{}, false, nil
	}
	var secs int64
	var horizon *time.Time
	if err := db.QueryRow(ctx, "SELECT interval_seconds, horizon FROM "+q+".inbox_partitioning").Scan(&secs, &horizon); err != nil {
		return Partitioning{}, false, fmt.Errorf("inbox: partitioning of %s: %w", schema, err)
	}
	p := Partitioning{Interval: time.Duration(secs) * time.Second}
	if horizon != nil {
		p.Horizon = *horizon
	}
	return p, true, nil
}

// ListPartitions returns the partitions of schema's inbox, oldest first
// (none for the plain layout).
func ListPartitions(ctx context.Context, db DB, schema string) ([]Partition, error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	tx, err := isoTx(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("inbox: partitions of %s: %w", schema, err)
	}
	parts, err := listPartitions(ctx, tx, schema)
	if err != nil {
		return nil, rollback(ctx, tx, err)
	}
	return parts, tx.Commit(ctx)
}

// isoTx begins a transaction whose timestamps print in ISO style, so that
// a partition bound read back from its text form is exact (other styles
// print zone abbreviations, which can be ambiguous).
func isoTx(ctx context.Context, db DB) (pgx.Tx, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('DateStyle', 'ISO', true)"); err != nil {
		return nil, rollback(ctx, tx, err)
	}
	return tx, nil
}

// listPartitions reads the bounds from the catalog, the only authority
// (partitions made by hand are seen too). tx must be an isoTx.
func listPartitions(ctx context.Context, tx pgx.Tx, schema string) ([]Partition, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname, b[1]::timestamptz, b[2]::timestamptz
		FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
			'^FOR VALUES FROM \(''([^'']+)''\) TO \(''([^'']+)''\)$') AS b
		WHERE i.inhparent = to_regclass($1)
		ORDER BY 2 NULLS FIRST, 1`, pgx.Identifier{schema}.Sanitize()+".inbox")
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Partition, error) {
		var p Partition
		var from, to *time.Time
		err := r.Scan(&p.Name, &from, &to)
		if from != nil && to != nil {
			p.From, p.To = from.UTC(), to.UTC()
		}
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return parts, nil
}

// partitionTx runs f in a transaction holding schema's partition lock,
// which serialises every creation and drop, so a range being dropped is
// never created again behind the drop's back.
func partitionTx(ctx context.Context, db DB, schema string, f func(tx pgx.Tx, p Partitioning) error) error {
	tx, err := isoTx(ctx, db)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('inboxbench-partitions:' || $1))", schema); err != nil {
		return rollback(ctx, tx, fmt.Errorf("partition lock: %w", err))
	}
	p, ok, err := ReadPartitioning(ctx, tx, schema)
	if err == nil && !ok {
		err = fmt.Errorf("inbox: schema %s has a plain (unpartitioned) inbox", schema)
	}
	if err == nil {
		err = f(tx, p)
	}
	if err != nil {
		return rollback(ctx, tx, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// CreatePartitions creates the missing partitions that hold event times
// from through to (inclusive) and returns the ones it created. A range
// before the retention horizon is refused with ErrBeyondRetention.
func CreatePartitions(ctx context.Context, db DB, schema string, from, to time.Time) ([]Partition, error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	if to.Before(from) {
		return nil, fmt.Errorf("inbox: create partitions of %s: %s is before %s", schema, to, from)
	}
	var created []Partition
	err := partitionTx(ctx, db, schema, func(tx pgx.Tx, p Partitioning) error {
		created = nil
		if !p.Horizon.IsZero() && from.Before(p.Horizon) {
			return fmt.Errorf("inbox: schema %s: %w: event time %s: the partitions before %s were dropped, so whether such an event already took effect is forgotten; it is refused rather than applied again (retention must cover every window in which an event can come back)",
				schema, ErrBeyondRetention, from.UTC().Format(time.RFC3339Nano), p.Horizon.UTC().Format(time.RFC3339))
		}
		iv := p.Interval
		first, last := partitionStart(from, iv), partitionStart(to, iv)
		if n := (last.Unix()-first.Unix())/int64(iv/time.Second) + 1; n > maxCreate {
			return fmt.Errorf("inbox: schema %s: %s to %s needs %d partitions of %v, more than %d at once", schema, from, to, n, iv, maxCreate)
		}
		parts, err := listPartitions(ctx, tx, schema)
		if err != nil {
			return err
		}
		q := pgx.Identifier{schema, "inbox"}.Sanitize()
		for lo := first; !lo.After(last); lo = lo.Add(iv) {
			hi := lo.Add(iv)
			if slices.ContainsFunc(parts, func(pt Partition) bool { return !pt.From.IsZero() && !pt.From.After(lo) && !pt.To.Before(hi) }) {
				continue
			}
			name := partitionName(lo, iv)
			qn := pgx.Identifier{schema, name}.Sanitize()
			// An overlapping partition of another shape makes ATTACH fail,
			// naming it: nothing is created over it.
			if _, err := tx.Exec(ctx, "CREATE TABLE "+qn+" (LIKE "+q+" INCLUDING DEFAULTS)"); err != nil {
				return fmt.Errorf("create partition %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
				q, qn, lo.Format(time.RFC3339), hi.Format(time.RFC3339))); err != nil {
				return fmt.Errorf("attach partition %s: %w", name, err)
			}
			created = append(created, Partition{Name: name, From: lo, To: hi})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: create partitions of %s: %w", schema, err)
	}
	return created, nil
}

// createAhead creates the partitions from the database's current time to
// ahead after it.
func createAhead(ctx context.Context, db DB, schema string, ahead time.Duration) ([]Partition, error) {
	var now time.Time
	if err := db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return nil, fmt.Errorf("inbox: create partitions of %s: read the time: %w", schema, err)
	}
	return CreatePartitions(ctx, db, schema, now, now.Add(ahead))
}

// DropPartitions drops every partition of schema's inbox whose whole range
// is older than now-olderThan (event time) and returns them, oldest first,
// with their row counts. The partition holding the cutoff is kept, so
// events are remembered for at least olderThan. The retention horizon
// moves to the end of the newest dropped partition in the same
// transaction, so events of a dropped range are refused from then on
// instead of finding no trace of themselves.
//
// Each drop takes the inbox's ACCESS EXCLUSIVE lock for a moment (inserts
// wait for it); the wait is bounded and retried a few times.
func DropPartitions(ctx context.Context, db DB, schema string, olderThan time.Duration) ([]Partition, error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	if olderThan <= 0 {
		return nil, fmt.Errorf("inbox: drop partitions of %s: retention %v must be positive (it must cover every window in which an event can be redelivered)", schema, olderThan)
	}
	var cutoff time.Time
	if err := db.QueryRow(ctx, "SELECT now() - $1::interval", olderThan).Scan(&cutoff); err != nil {
		return nil, fmt.Errorf("inbox: drop partitions of %s: compute cutoff: %w", schema, err)
	}
	expired := func(p Partition) bool { return !p.To.IsZero() && !p.To.After(cutoff) }
	// Count before taking the lock: counting a big partition takes a while,
	// and creators of new partitions wait for that lock.
	parts, err := ListPartitions(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	counts := map[string]int64{}
	for _, p := range parts {
		if !expired(p) {
			continue
		}
		n, err := countRows(ctx, db, schema, p.Name)
		switch {
		case pgCode(err) == codeUndefinedTable: // dropped meanwhile by another run
		case err != nil:
			return nil, fmt.Errorf("inbox: drop partitions of %s: %w", schema, err)
		default:
			counts[p.Name] = n
		}
	}
	var dropped []Partition
	for attempt := 1; ; attempt++ {
		err := partitionTx(ctx, db, schema, func(tx pgx.Tx, p Partitioning) error {
			dropped = nil
			if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", dropLockTimeout); err != nil {
				return err
			}
			parts, err := listPartitions(ctx, tx, schema)
			if err != nil {
				return err
			}
			horizon := p.Horizon
			for _, pt := range parts {
				if !expired(pt) {
					continue
				}
				n, ok := counts[pt.Name]
				if !ok { // created since the count, by a late event
					if n, err = countRows(ctx, tx, schema, pt.Name); err != nil {
						return err
					}
				}
				if _, err := tx.Exec(ctx, "DROP TABLE "+pgx.Identifier{schema, pt.Name}.Sanitize()); err != nil {
					return fmt.Errorf("drop partition %s: %w", pt.Name, err)
				}
				pt.Rows = n
				dropped = append(dropped, pt)
				if pt.To.After(horizon) {
					horizon = pt.To
				}
			}
			if horizon.Equal(p.Horizon) {
				return nil
			}
			_, err = tx.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "inbox_partitioning"}.Sanitize()+" SET horizon = $1", horizon)
			return err
		})
		if err == nil {
			return dropped, nil
		}
		if pgCode(err) != codeLockTimeout || attempt >= 5 {
			return nil, fmt.Errorf("inbox: drop partitions of %s: %w", schema, err)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

func countRows(ctx context.Context, db DB, schema, table string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count rows of %s: %w", table, err)
	}
	return n, nil
}

// isNoPartition reports PostgreSQL's "no partition of relation inbox found
// for row": the event's range has no partition (yet, or any more).
func isNoPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == codeCheckViolation && pe.TableName == "inbox" && pe.ConstraintName == ""
}

// Layout detection and the partitions an Inbox knows to exist.
const (
	layoutUnknown int32 = iota
	layoutPlain
	layoutPartitioned
)

type partCache struct {
	layout   atomic.Int32
	mu       sync.RWMutex
	interval time.Duration
	known    map[int64]bool // starts (Unix seconds) of partitions seen to exist
}

// forget drops what the cache knows, after an insert found no partition
// where it expected one (dropped by a retention run elsewhere).
func (c *partCache) forget() {
	c.mu.Lock()
	clear(c.known)
	c.mu.Unlock()
}

// plain reports a schema known to have the plain layout, where there is
// nothing to ensure.
func (c *partCache) plain() bool { return c.layout.Load() == layoutPlain }

// ensurePartitions makes sure the partitions for evs exist before their
// inbox rows are written. It is free for the plain layout (after one
// catalog read per Inbox) and a map lookup for a known partition. An event
// without a time cannot be placed (ErrInvalidEvent); one before the
// retention horizon is refused (ErrBeyondRetention).
//
// Every strategy calls it for the delivered events before their
// transaction, never inside one (creating a partition needs another
// connection from the pool). Drained parked events need no call: each was
// a delivered event whose partition was ensured when it was parked.
func (in *Inbox) ensurePartitions(ctx context.Context, evs ...*envelope.Event) error {
	c := &in.part
	switch c.layout.Load() {
	case layoutPlain:
		return nil
	case layoutUnknown:
		p, ok, err := ReadPartitioning(ctx, in.pool, in.opt.Schema)
		if err != nil {
			return err
		}
		if !ok {
			c.layout.Store(layoutPlain)
			return nil
		}
		c.mu.Lock()
		c.interval = p.Interval
		if c.known == nil {
			c.known = map[int64]bool{}
		}
		c.mu.Unlock()
		c.layout.Store(layoutPartitioned)
	}
	var missing []time.Time
	c.mu.RLock()
	for _, ev := range evs {
		if ev.Time.IsZero() {
			c.mu.RUnlock()
			return fmt.Errorf("%w: it has no time, and a partitioned inbox keys events by their CloudEvents time", ErrInvalidEvent)
		}
		if start := partitionStart(ev.Time, c.interval); !c.known[start.Unix()] && !slices.ContainsFunc(missing, start.Equal) {
			missing = append(missing, start)
		}
	}
	c.mu.RUnlock()
	for _, start := range missing {
		if _, err := CreatePartitions(ctx, in.pool, in.opt.Schema, start, start); err != nil {
			return err
		}
		c.mu.Lock()
		c.known[start.Unix()] = true
		c.mu.Unlock()
	}
	return nil
}

// ensureEach ensures partitions event by event (with retries) for the
// events of idx, hands each event that cannot have one to fail, and
// returns the others.
func (in *Inbox) ensureEach(ctx context.Context, events []*envelope.Event, idx []int, fail func(i, attempts int, err error)) []int {
	if in.part.layout.Load() == layoutUnknown {
		// Learn the layout once; a failure shows again per event below.
		_, _ = in.retry(ctx, func(ctx context.Context) error { return in.ensurePartitions(ctx) })
	}
	if in.part.plain() {
		return idx
	}
	kept := make([]int, 0, len(idx))
	for _, i := range idx {
		attempts, err := in.retry(ctx, func(ctx context.Context) error { return in.ensurePartitions(ctx, events[i]) })
		if err != nil {
			fail(i, attempts, err)
			continue
		}
		kept = append(kept, i)
	}
	return kept
}

// eventTime is the event time an inbox row gets: microseconds, as
// PostgreSQL stores them (pgx's binary encoding truncates; the pipeline's
// text encoding must agree, or two copies of an event would differ in
// their partition key), and nil when the event has none.
func eventTime(ev *envelope.Event) *time.Time {
	if ev.Time.IsZero() {
		return nil
	}
	t := ev.Time.Truncate(time.Microsecond).UTC()
	return &t
}

// eventTimeText is eventTime in the text form the pipeline sends.
func eventTimeText(ev *envelope.Event) []byte {
	t := eventTime(ev)
	if t == nil {
		return nil
	}
	return []byte(t.Format("2006-01-02T15:04:05.999999Z07:00"))
}
