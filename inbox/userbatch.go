package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox/strategyfile"
)

// outcome: batch — a strategy file's @batch statements apply a whole batch
// of events in one transaction, as a team's production batch SQL would:
// every event parameter is bound as an array over the batch (in delivery
// order), :ordinal numbers the events 1..n, and the last statement
// returns one row per event with its ordinal and its result. The harness
// hands such a file batches of up to the workload's batch size, as it does
// the built-in batch strategy, and parks the events it answers GAP.
//
// With parking on, a chunk also carries the parked events of its
// aggregates, ahead of the chunk's own (they arrived first), as the
// built-in batch decides its parked events beside the batch: the
// predecessor that releases a parked event usually arrives in a batch,
// and the file then applies the whole run in one statement instead of
// the harness draining it event by event. The chunk's transaction takes
// the park locks of its aggregates first (sorted, as every park decision
// and drain check does), so no park of these aggregates can slip between
// the read and the commit; parked events the file decided (anything but
// GAP) leave the parked table in that transaction.

// batchCall is one batch of events applied with the @batch statements:
// their outcomes, in input order, and the aggregates whose parked events
// a chunk decided under their park locks (swept).
type batchCall struct {
	*fileRun
	events []*envelope.Event
	outs   []Outcome
	swept  map[string]bool
}

// batch applies events with the @batch statements, in chunks of the
// inbox's batch size; a chunk that fails for good is redone event by
// event, so one bad event does not cost its neighbours their decision.
//
// With sweep, each chunk carries its aggregates' parked events; it
// returns the aggregates whose parked events a chunk decided under their
// park locks: their drain check after the commit would find nothing the
// file can apply.
func (r *fileRun) batch(ctx context.Context, events []*envelope.Event, sweep bool) ([]Outcome, map[string]bool) {
	b := &batchCall{fileRun: r, events: events, outs: make([]Outcome, len(events)), swept: map[string]bool{}}
	var ok []int
	for i, ev := range events {
		if o, bad := invalid(r.consumer, ev); bad {
			b.outs[i] = o
			continue
		}
		ok = append(ok, i)
	}
	size := r.in.opt.BatchSize
	for start := 0; start < len(ok); start += size {
		b.chunk(ctx, ok[start:min(start+size, len(ok))], sweep)
	}
	return b.outs, b.swept
}

// chunk decides the events of idx in one transaction; sweep says whether
// the chunk also carries its aggregates' parked events (swept collects
// the aggregates of such chunks that committed). A chunk that fails for
// good is redone event by event without the parked events, so a parked
// event the file cannot decide costs only its own drain, not its
// aggregate's later events.
func (b *batchCall) chunk(ctx context.Context, idx []int, sweep bool) {
	evs := make([]*envelope.Event, len(idx))
	for k, i := range idx {
		evs[k] = b.events[i]
	}
	start := time.Now()
	var fb fileBatch
	attempts, err := b.in.retry(ctx, func(ctx context.Context) error {
		if err := b.in.ensurePartitions(ctx, evs...); err != nil {
			return err
		}
		var err error
		fb, err = b.runBatch(ctx, evs, sweep)
		return err
	})
	if err != nil && (len(idx) > 1 || sweep) && !errors.Is(err, ErrRetryable) && ctx.Err() == nil {
		for _, i := range idx {
			b.chunk(ctx, []int{i}, false)
			delete(b.swept, b.events[i].Subject) // applied without the park locks: check after all
		}
		return
	}
	d := time.Since(start)
	if err != nil {
		// Nothing committed: the parked events stay parked.
		for _, i := range idx {
			b.outs[i] = b.failed(b.events[i], b.s.stmtErr(fb.last, err), attempts)
			b.outs[i].Duration = d
		}
		return
	}
	outcome := func(ev *envelope.Event, res string) Outcome {
		o := newOutcome(ev)
		rr, perr := ParseResult(res)
		if perr != nil {
			o = b.failed(ev, b.s.stmtErr(fb.last, perr), 0)
		}
		o.Result, o.Attempts, o.Duration = rr, attempts, d
		return o
	}
	byAgg := map[string]int{} // aggregate → the chunk event its drained events hang on
	for k, i := range idx {
		agg := b.events[i].Subject
		b.outs[i] = outcome(b.events[i], fb.res[len(fb.parked)+k])
		if sweep {
			b.swept[agg] = true
		}
		if j, ok := byAgg[agg]; !ok || b.outs[j].Result != Applied {
			byAgg[agg] = i
		}
	}
	for k, p := range fb.parked {
		if fb.res[k] == Gap.String() {
			continue // still waiting for its predecessor, still parked
		}
		o := outcome(p, fb.res[k])
		if o.Result == Applied {
			b.in.counters.drained.Add(1)
		}
		i := byAgg[p.Subject]
		b.outs[i].Drained = append(b.outs[i].Drained, o)
	}
}

// fileBatch is what one run of the @batch statements decided: a result per
// event, the swept parked events first, then the chunk's.
type fileBatch struct {
	parked []*envelope.Event
	res    []string
	last   *renderedStmt // the statement that failed, else the last
}

// runBatch runs the @batch statements once, in one transaction, over the
// chunk's events and (sweep) its aggregates' parked events. The file sees
// each event once: a second copy of an event (a redelivery in the same
// batch, or of a parked event) gets the first copy's result, DUPLICATE
// where that one applied, as in the built-in batch strategy.
func (r *fileRun) runBatch(ctx context.Context, evs []*envelope.Event, sweep bool) (fileBatch, error) {
	stmts := r.sql[strategyfile.Batch]
	b := fileBatch{last: stmts[len(stmts)-1]}
	err := pgx.BeginFunc(ctx, r.in.pool, func(tx pgx.Tx) error {
		all := evs
		if sweep {
			var err error
			if b.parked, err = r.sweepParked(ctx, tx, evs); err != nil {
				return err
			}
			all = append(append(make([]*envelope.Event, 0, len(b.parked)+len(evs)), b.parked...), evs...)
		}
		uniq, first, again := firstCopies(all)
		res, err := r.decideBatch(ctx, tx, uniq, &b.last)
		if err != nil {
			return err
		}
		b.res = make([]string, len(all))
		for k := range all {
			b.res[k] = res[first[k]]
			if again[k] && b.res[k] == Applied.String() {
				b.res[k] = Duplicate.String()
			}
		}
		return r.unparkDecided(ctx, tx, b.parked, b.res)
	})
	return b, err
}

// firstCopies lists each event of evs once, at its first copy; first maps
// every position in evs to its event's position in uniq, again marks the
// later copies.
func firstCopies(evs []*envelope.Event) (uniq []*envelope.Event, first []int, again []bool) {
	at := make(map[eventKey]int, len(evs))
	first, again = make([]int, len(evs)), make([]bool, len(evs))
	uniq = make([]*envelope.Event, 0, len(evs))
	for k, ev := range evs {
		j, ok := at[keyOf(ev)]
		if !ok {
			j = len(uniq)
			at[keyOf(ev)] = j
			uniq = append(uniq, ev)
		}
		first[k], again[k] = j, ok
	}
	return uniq, first, again
}

// decideBatch runs the @batch statements in tx and returns each event's
// result in batch order; *last is set to the statement that failed. The
// statements go out in one pipeline (one round trip, as the built-in batch
// sends its locks, parked reads and claims): their parameters are all
// known up front, and the server runs them in order, each seeing what the
// ones before it did; an error skips the rest.
func (r *fileRun) decideBatch(ctx context.Context, tx pgx.Tx, evs []*envelope.Event, last **renderedStmt) (_ []string, err error) {
	stmts := r.sql[strategyfile.Batch]
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue(st.SQL, batchArgs(st, r.consumer, evs)...)
	}
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for _, st := range stmts[:len(stmts)-1] {
		if _, err := br.Exec(); err != nil {
			*last = st
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	res := make([]string, len(evs))
	var ord int64
	var result string
	_, err = pgx.ForEachRow(rows, []any{&ord, &result}, func() error {
		if ord < 1 || ord > int64(len(evs)) || res[ord-1] != "" {
			return fmt.Errorf("%w: ordinal %d: want each of 1..%d once", ErrUnknownResult, ord, len(evs))
		}
		res[ord-1] = result
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k, v := range res {
		if v == "" {
			return nil, fmt.Errorf("%w: no row for ordinal %d (%s)", ErrUnknownResult, k+1, evs[k].ID)
		}
	}
	return res, nil
}

// sweepParked takes the park locks of the events' aggregates (sorted) in
// tx and reads their parked events, lowest version first.
func (r *fileRun) sweepParked(ctx context.Context, tx pgx.Tx, evs []*envelope.Event) ([]*envelope.Event, error) {
	aggs := make([]string, len(evs))
	for i, ev := range evs {
		aggs[i] = ev.Subject
	}
	b := &pgx.Batch{} // one round trip: the read runs after the locks
	b.Queue(r.in.sql.parkLockMany, r.consumer, aggs)
	b.Queue(r.in.sql.batchParked, r.consumer, aggs)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("park locks: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("read parked events: %w", err)
	}
	parked, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*envelope.Event, error) { return scanParked(r, "") })
	if err != nil {
		return nil, fmt.Errorf("read parked events: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("read parked events: %w", err)
	}
	return parked, nil
}

// unparkDecided deletes, in tx, the parked events the file decided (res
// holds their results first); a result it cannot read fails the
// transaction, so no parked event leaves without a decision.
func (r *fileRun) unparkDecided(ctx context.Context, tx pgx.Tx, parked []*envelope.Event, res []string) error {
	var src, ids []string
	for k, p := range parked {
		rr, err := ParseResult(res[k])
		if err != nil {
			return fmt.Errorf("parked event %s: %w", p.Key(), err)
		}
		if rr != Gap {
			src, ids = append(src, p.Source), append(ids, p.ID)
		}
	}
	if len(src) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, r.in.sql.batchParkedDelete, r.consumer, src, ids); err != nil {
		return fmt.Errorf("unpark decided events: %w", err)
	}
	return nil
}
