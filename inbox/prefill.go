package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Prefill is history loaded into an inbox before a run, so a strategy is
// judged at the size its inbox will have in production rather than empty.
//
// The rows are the run's consumer's own, with the run's source and
// aggregates, as a long-lived consumer's inbox holds them: their keys
// interleave with the run's in the primary key (ids acct-000123-p7 beside
// the run's acct-000123-v7), so the run inserts into a large index, not
// into a fresh corner of it. Their ids never collide with a workload's
// (whose ids end in -vN), and their aggregate_version is 0, which no event
// carries (versions start at 1): the checker's snapshot skips them.
//
// Row k of Rows was applied at AppliedBefore − Age·(Rows−k)/Rows and
// occurred as long before EventTimeBefore: the history spans Age evenly,
// oldest first, and ends where the run begins. On a partitioned inbox the
// partitions of that range are created first.
type Prefill struct {
	Rows       int64
	Age        time.Duration
	Aggregates int
	Consumer   string
	Source     string
	// AppliedBefore ends the applied_at spread (now, for retention by
	// applied_at); EventTimeBefore ends the event-time spread (the run's
	// first event, for retention by event time).
	AppliedBefore, EventTimeBefore time.Time
	// Progress, when set, is told the rows loaded so far.
	Progress func(loaded int64)
}

// prefillChunk is the rows one INSERT loads: each commits on its own, so
// the load makes progress visible and holds no transaction for minutes.
const prefillChunk = 500_000

// prefillSQL inserts rows $6 ≤ k < $7 of the history.
const prefillSQL = `INSERT INTO {T} (consumer, source, event_id, aggregate_id, aggregate_version, applied_at, event_time)
SELECT $1, $2, a.id || '-p' || (k / $3)::text, a.id, 0,
	$5::timestamptz - $4::interval * (($8 - k)::float8 / $8),
	$9::timestamptz - $4::interval * (($8 - k)::float8 / $8)
FROM generate_series($6::bigint, $7::bigint - 1) AS k,
	LATERAL (SELECT 'acct-' || lpad((k % $3)::text, greatest(6, length((k % $3)::text)), '0') AS id) AS a`

// Load inserts the history into schema's inbox, then vacuums and analyzes
// it, so neither autovacuum's first pass over the new rows nor stale
// planner statistics fall into the run that follows.
func (p Prefill) Load(ctx context.Context, db DB, schema string) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	switch {
	case p.Rows <= 0 || p.Age <= 0 || p.Aggregates <= 0:
		return fmt.Errorf("inbox: prefill %s: rows %d, age %s, aggregates %d: all must be positive", schema, p.Rows, p.Age, p.Aggregates)
	case p.AppliedBefore.IsZero() || p.EventTimeBefore.IsZero():
		return errors.New("inbox: prefill: AppliedBefore and EventTimeBefore must be set")
	}
	_, partitioned, err := ReadPartitioning(ctx, db, schema)
	if err != nil {
		return fmt.Errorf("inbox: prefill %s: %w", schema, err)
	}
	if partitioned {
		if _, err := CreatePartitions(ctx, db, schema, p.EventTimeBefore.Add(-p.Age), p.EventTimeBefore); err != nil {
			return fmt.Errorf("inbox: prefill %s: %w", schema, err)
		}
	}
	q := strings.Replace(prefillSQL, "{T}", pgx.Identifier{schema, "inbox"}.Sanitize(), 1)
	for from := int64(0); from < p.Rows; from += prefillChunk {
		to := min(from+prefillChunk, p.Rows)
		if _, err := db.Exec(ctx, q, p.Consumer, p.Source, p.Aggregates, p.Age, p.AppliedBefore, from, to, p.Rows, p.EventTimeBefore); err != nil {
			return fmt.Errorf("inbox: prefill %s: rows %d to %d: %w", schema, from, to, err)
		}
		if p.Progress != nil {
			p.Progress(to)
		}
	}
	if _, err := db.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{schema, "inbox"}.Sanitize()); err != nil {
		return fmt.Errorf("inbox: prefill %s: vacuum: %w", schema, err)
	}
	return nil
}
