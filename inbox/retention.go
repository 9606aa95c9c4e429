package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention. The inbox must keep a row for as long as its event can come
// again (upstream replay, retries, disaster recovery, manual resends): a
// bound shorter than the broker's replay window turns a replay into a
// second effect. Prune is therefore always called with an explicit bound.

// Retention is what one retention pass did.
type Retention struct {
	Partitioned bool
	// Rows is the inbox rows removed: deleted (plain layout) or dropped
	// with their partitions.
	Rows int64
	// Dropped and Created are the partitions dropped (oldest first) and
	// created ahead (partitioned layout).
	Dropped, Created []Partition
}

// ApplyRetention removes schema's inbox rows older than olderThan. On the
// plain layout it deletes rows applied before now-olderThan, at most
// batchSize per transaction, so it never holds long locks or bloats one
// transaction. On the partitioned layout it drops every partition whose
// whole event-time range is older than that (DropPartitions) and creates
// the partitions ahead (DefaultPartitionsAhead), so a periodic run keeps
// partition creation off the insert path; there the age counts from the
// event's own time, which is what a replay carries, and an event of a
// dropped range that comes back is refused (ErrBeyondRetention) instead of
// applied again. Parked events and idempotency records are not touched.
func ApplyRetention(ctx context.Context, db DB, schema string, olderThan time.Duration, batchSize int) (Retention, error) {
	if err := ValidateSchema(schema); err != nil {
		return Retention{}, err
	}
	if olderThan <= 0 {
		return Retention{}, fmt.Errorf("inbox: prune %s: retention %v must be positive (it must cover every window in which an event can be redelivered)", schema, olderThan)
	}
	if batchSize <= 0 {
		return Retention{}, fmt.Errorf("inbox: prune %s: batch size %d must be positive", schema, batchSize)
	}
	p, partitioned, err := ReadPartitioning(ctx, db, schema)
	if err != nil {
		return Retention{}, fmt.Errorf("inbox: prune %s: %w", schema, err)
	}
	if !partitioned {
		n, err := pruneRows(ctx, db, schema, olderThan, batchSize)
		return Retention{Rows: n}, err
	}
	r := Retention{Partitioned: true}
	if r.Dropped, err = DropPartitions(ctx, db, schema, olderThan); err != nil {
		return r, err
	}
	for _, d := range r.Dropped {
		r.Rows += d.Rows
	}
	r.Created, err = createAhead(ctx, db, schema, DefaultPartitionsAhead*p.Interval)
	return r, err
}

// pruneRows is the plain layout's batched delete.
func pruneRows(ctx context.Context, db DB, schema string, olderThan time.Duration, batchSize int) (int64, error) {
	q := buildSQL(pgx.Identifier{schema}.Sanitize(), "")
	// One cutoff for the whole run, so rows applied while pruning are safe.
	var cutoff time.Time
	if err := db.QueryRow(ctx, "SELECT now() - $1::interval", olderThan).Scan(&cutoff); err != nil {
		return 0, fmt.Errorf("inbox: prune %s: compute cutoff: %w", schema, err)
	}
	var total int64
	for {
		// Each Exec outside a transaction commits on its own.
		tag, err := db.Exec(ctx, q.pruneBatch, cutoff, batchSize)
		if err != nil {
			return total, fmt.Errorf("inbox: prune %s: after %d rows: %w", schema, total, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// Stats describes the inbox of a schema.
type Stats struct {
	Schema          string
	Rows            int64
	SizeBytes       int64     // pg_total_relation_size: heap, indexes, TOAST (of every partition)
	Oldest          time.Time // zero when empty
	Parked          int64
	OldestParked    time.Time // zero when nothing is parked
	IdempotencyKeys int64

	// Partitioned layout only.
	Partitioned       bool
	PartitionInterval time.Duration
	Partitions        int
	PartitionsFrom    time.Time // start of the oldest partition
	PartitionsTo      time.Time // end of the newest partition
	Horizon           time.Time // events before it are refused; zero until a partition was dropped
}

// ReadStats returns the inbox statistics of schema.
func ReadStats(ctx context.Context, db DB, schema string) (Stats, error) {
	if err := ValidateSchema(schema); err != nil {
		return Stats{}, err
	}
	q := buildSQL(pgx.Identifier{schema}.Sanitize(), "")
	s := Stats{Schema: schema}
	var oldest, oldestParked *time.Time
	if err := db.QueryRow(ctx, q.stats).Scan(&s.Rows, &s.SizeBytes, &oldest, &s.Parked, &oldestParked, &s.IdempotencyKeys); err != nil {
		return s, fmt.Errorf("inbox: stats of %s: %w", schema, err)
	}
	if oldest != nil {
		s.Oldest = *oldest
	}
	if oldestParked != nil {
		s.OldestParked = *oldestParked
	}
	p, partitioned, err := ReadPartitioning(ctx, db, schema)
	if err != nil || !partitioned {
		return s, err
	}
	parts, err := ListPartitions(ctx, db, schema)
	if err != nil {
		return s, err
	}
	s.Partitioned, s.PartitionInterval, s.Horizon, s.Partitions = true, p.Interval, p.Horizon, len(parts)
	for _, pt := range parts {
		if !pt.From.IsZero() && (s.PartitionsFrom.IsZero() || pt.From.Before(s.PartitionsFrom)) {
			s.PartitionsFrom = pt.From
		}
		if pt.To.After(s.PartitionsTo) {
			s.PartitionsTo = pt.To
		}
	}
	return s, nil
}

// Stats returns the statistics of the Inbox's schema.
func (in *Inbox) Stats(ctx context.Context) (Stats, error) {
	return ReadStats(ctx, in.pool, in.opt.Schema)
}

// Prune applies retention to the Inbox's schema (see the package function).
func (in *Inbox) Prune(ctx context.Context, olderThan time.Duration, batchSize int) (int64, error) {
	r, err := ApplyRetention(ctx, in.pool, in.opt.Schema, olderThan, batchSize)
	return r.Rows, err
}

// ParkedEvent is a parked row as StuckParked reports it.
type ParkedEvent struct {
	Consumer, Source, ID, Subject string
	Version                       int64
	Kind                          string
	Amount                        int64
	ParkedAt                      time.Time
}

// StuckParkedLimit caps the rows StuckParked returns; the count of the
// rest is still exact via Stats.Parked.
const StuckParkedLimit = 10000

// StuckParked returns events parked longer than olderThan (Options.ParkMaxAge
// when olderThan is 0): a predecessor that never came. The checker reports
// them as parked-stuck; they are never dropped silently.
func (in *Inbox) StuckParked(ctx context.Context, olderThan time.Duration) ([]ParkedEvent, error) {
	if olderThan <= 0 {
		olderThan = in.opt.ParkMaxAge
	}
	rows, err := in.pool.Query(ctx, in.sql.stuckParked, olderThan, StuckParkedLimit)
	if err != nil {
		return nil, fmt.Errorf("inbox: list parked events older than %v in %s: %w", olderThan, in.opt.Schema, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ParkedEvent, error) {
		var p ParkedEvent
		err := r.Scan(&p.Consumer, &p.Source, &p.ID, &p.Subject, &p.Version, &p.Kind, &p.Amount, &p.ParkedAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: list parked events older than %v in %s: %w", olderThan, in.opt.Schema, err)
	}
	return out, nil
}
