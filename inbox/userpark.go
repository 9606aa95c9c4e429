package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/envelope"
)

// Parking for strategy files. A file answers GAP for a version-ahead
// event; with parking on, the harness then holds the event in the parked
// table and applies it again, with the file's own SQL, once its
// predecessor applied — so reordered streams, and the version and
// snapshot rules they exercise, run with files as they do with the
// built-ins. The file's SQL never sees the parked table.
//
// Why it is safe: a park decision and the drain check that follows a
// predecessor's commit take the same advisory lock (per schema, consumer
// and aggregate). The park transaction reads the account's version after
// taking it: if the predecessor committed first, the event is applied
// again instead of parked; otherwise the drain check, which runs after the
// predecessor's commit and waits for the lock, sees the parked row.

// parkAndDrain parks the outcomes the file answered GAP and drains the
// parked successors of every aggregate that applied something, except the
// swept ones: their parked events were decided in the batch's own
// transaction, under the park locks (userbatch.go).
func (r *fileRun) parkAndDrain(ctx context.Context, events []*envelope.Event, outs []Outcome, swept map[string]bool) {
	last := map[string]int{} // aggregate → index of its last applied outcome
	for i := range outs {
		if outs[i].Result == Gap && !outs[i].ParkOverflow && events[i] != nil {
			outs[i] = r.park(ctx, events[i], outs[i])
		}
		if outs[i].Result == Applied && !swept[outs[i].Subject] {
			last[outs[i].Subject] = i
		}
	}
	if len(last) == 0 {
		return
	}
	aggs := make([]string, 0, len(last))
	for agg := range last {
		aggs = append(aggs, agg)
	}
	waiting, err := r.in.parkedAmong(ctx, r.consumer, aggs)
	for _, agg := range waiting {
		i := last[agg]
		d, derr := r.drain(ctx, agg)
		outs[i].Drained = append(outs[i].Drained, d...)
		outs[i].DrainErr = errors.Join(outs[i].DrainErr, derr)
	}
	if err != nil {
		for _, i := range last {
			outs[i].DrainErr = errors.Join(outs[i].DrainErr, err)
		}
	}
}

// parkedAmong returns the aggregates of aggs that have parked events,
// read after taking their park locks (in order, so drainers cannot
// deadlock): a park decided before the caller's commit is seen.
func (in *Inbox) parkedAmong(ctx context.Context, consumer string, aggs []string) ([]string, error) {
	var out []string
	err := pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, in.sql.parkLockMany, consumer, aggs); err != nil {
			return fmt.Errorf("park locks: %w", err)
		}
		rows, err := tx.Query(ctx, in.sql.parkedAmong, consumer, aggs)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: consumer %q: look for parked successors: %w", consumer, err)
	}
	return out, nil
}

// park holds a version-ahead event, or applies it again when its
// predecessor committed meanwhile.
func (r *fileRun) park(ctx context.Context, ev *envelope.Event, gap Outcome) Outcome {
	out := gap
	for range 3 {
		var parked, overflow bool
		attempts, err := r.in.retry(ctx, func(ctx context.Context) error {
			var err error
			parked, overflow, err = r.in.parkIfAhead(ctx, r.consumer, ev)
			return err
		})
		switch {
		case err != nil:
			o := newOutcome(ev)
			o.Err, o.Attempts = eventErr(r.consumer, ev, r.s.Name()+" (parking)", err), attempts
			return o
		case overflow:
			r.in.counters.parkOverflow.Add(1)
			out.ParkOverflow = true
			return out
		case parked:
			r.in.counters.parked.Add(1)
			out.Result = Parked
			return out
		}
		// The predecessor is there now: the file decides again.
		if out = r.event(ctx, ev); out.Result != Gap {
			return out
		}
	}
	return out
}

// parkIfAhead parks ev under the aggregate's park lock when it is still
// ahead of the account's version; parked false means it is not (apply it
// again), overflow that the aggregate's parking bound is full.
func (in *Inbox) parkIfAhead(ctx context.Context, consumer string, ev *envelope.Event) (parked, overflow bool, err error) {
	err = pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, in.sql.parkLock, consumer, ev.Subject); err != nil {
			return fmt.Errorf("park lock for %s: %w", ev.Subject, err)
		}
		var cur int64
		if err := tx.QueryRow(ctx, in.sql.accountVersion, ev.Subject).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read version of %s: %w", ev.Subject, err)
		}
		if ev.AggregateVersion <= cur+1 {
			return nil
		}
		var total, self int64
		if err := tx.QueryRow(ctx, in.sql.parkedCount, consumer, ev.Subject, ev.Source, ev.ID).Scan(&total, &self); err != nil {
			return fmt.Errorf("count parked events of %s: %w", ev.Subject, err)
		}
		if self == 0 && total >= int64(in.opt.ParkMaxPerAggregate) {
			overflow = true
			return nil
		}
		if _, err := tx.Exec(ctx, in.sql.parkInsert, consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, ev.Kind, ev.Amount,
			ev.Type, nullTime(ev.Time), ev.IdempotencyKey, ev.Tenant, ev.Operation); err != nil {
			return fmt.Errorf("park: %w", err)
		}
		parked = true
		return nil
	})
	return parked, overflow, err
}

// drain applies the aggregate's parked events with the file's SQL, lowest
// version first, until one is not decided or is still ahead.
func (r *fileRun) drain(ctx context.Context, agg string) ([]Outcome, error) {
	var outs []Outcome
	for {
		ev, err := r.in.firstParked(ctx, r.consumer, agg)
		if err != nil || ev == nil {
			return outs, err
		}
		o := r.event(ctx, ev)
		if o.Err != nil {
			return outs, o.Err
		}
		if o.Result == Gap {
			return outs, nil // still ahead: it waits for its own predecessor
		}
		// The decision committed: it is reported even when the unpark
		// fails (a canceled context can cancel the DELETE on the client
		// after the server ran it). A row that stayed is decided again
		// by a later drain, as a redelivery would be.
		outs = append(outs, o)
		if o.Result == Applied {
			r.in.counters.drained.Add(1)
		}
		if _, err := r.in.pool.Exec(ctx, r.in.sql.parkedDelete, r.consumer, ev.Source, ev.ID); err != nil {
			return outs, fmt.Errorf("unpark %s: %w", ev.Key(), err)
		}
	}
}

// firstParked returns the aggregate's lowest parked event (nil: none),
// read after taking the park lock, so a park decided before the caller's
// commit is seen.
func (in *Inbox) firstParked(ctx context.Context, consumer, agg string) (*envelope.Event, error) {
	var ev *envelope.Event
	err := pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, in.sql.parkLock, consumer, agg); err != nil {
			return fmt.Errorf("park lock for %s: %w", agg, err)
		}
		rows, err := tx.Query(ctx, in.sql.parkedFirst, consumer, agg)
		if err != nil {
			return err
		}
		evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*envelope.Event, error) { return scanParked(r, agg) })
		if len(evs) > 0 {
			ev = evs[0]
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: consumer %q: read parked events of %s: %w", consumer, agg, err)
	}
	return ev, nil
}

// DrainParked implements ParkDrainer: every aggregate of the consumer with
// parked events is drained with the file's SQL.
func (s *FileStrategy) DrainParked(ctx context.Context, in *Inbox, consumer string) ([]Outcome, error) {
	r, err := s.run(ctx, in, consumer)
	if err != nil {
		return nil, err
	}
	return in.drainEach(ctx, consumer, func(agg string) ([]Outcome, error) { return r.drain(ctx, agg) })
}
