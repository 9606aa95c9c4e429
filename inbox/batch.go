package inbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/jackc/pgx/v5"
)

// batchStrategy applies many events per transaction with set-based SQL.
type batchStrategy struct{}

func (batchStrategy) Name() string { return "batch" }
func (batchStrategy) Description() string {
	return "N events per transaction: aggregates locked with one SELECT … ORDER BY id FOR UPDATE, one multi-row INSERT … ON CONFLICT … RETURNING for the inbox, one UPDATE … FROM unnest(…) for every account"
}
func (batchStrategy) Broken() bool { return false }

func (batchStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	outs := make([]Outcome, len(events))
	var fast, slow []int
	first := map[string]int{} // event key → index of its first copy in this call
	copies := map[int]int{}
	for i, ev := range events {
		switch {
		case validate(consumer, ev) != nil || !fastPath(ev):
			slow = append(slow, i)
		default:
			if j, ok := first[ev.Key()]; ok {
				copies[i] = j
				continue
			}
			first[ev.Key()] = i
			fast = append(fast, i)
		}
	}
	for start := 0; start < len(fast); start += in.opt.BatchSize {
		in.batchChunk(ctx, consumer, events, fast[start:min(start+in.opt.BatchSize, len(fast))], outs)
	}
	// Snapshots and keyed events after the increments: an increment waiting
	// on a snapshot in the same batch is parked, then drained by it.
	for _, i := range slow {
		outs[i] = in.applyOne(ctx, "batch", consumer, events[i], in.defaultApplyOpts())
	}
	// A second copy of an event in one batch reads as its redelivery would.
	for i, j := range copies {
		o := outs[j]
		o.Drained = nil
		if o.Result == Applied {
			o.Result = Duplicate
		}
		outs[i] = o
	}
	return outs, joinOutcomeErrors(outs)
}

func (in *Inbox) batchChunk(ctx context.Context, consumer string, events []*envelope.Event, idx []int, outs []Outcome) {
	start := time.Now()
	var res map[int]Outcome
	var post []string
	attempts, err := in.retry(ctx, func(ctx context.Context) error {
		var err error
		res, post, err = in.batchTx(ctx, consumer, events, idx)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrRetryable) || ctx.Err() != nil {
			for _, i := range idx {
				outs[i] = newOutcome(events[i])
				outs[i].Err = eventErr(consumer, events[i], fmt.Sprintf("batch of %d", len(idx)), err)
				outs[i].Attempts = attempts
			}
			return
		}
		// One transaction for all: a non-retryable failure cost every event
		// its decision. Redo them one by one so the others still get theirs.
		in.counters.batchFallbacks.Add(1)
		for _, i := range idx {
			outs[i] = in.applyOne(ctx, "batch", consumer, events[i], applyOpts{parking: in.opt.Parking()})
		}
		return
	}
	d := time.Since(start)
	byAgg := map[string]int{}
	for _, i := range idx {
		o := res[i]
		o.Attempts, o.Duration = attempts, d
		outs[i] = o
		if _, ok := byAgg[o.Subject]; !ok || o.Result == Applied {
			byAgg[o.Subject] = i
		}
	}
	// Aggregates whose next parked event carries an idempotency key drain
	// through the shared path, which handles keys.
	for _, agg := range post {
		i := byAgg[agg]
		drained, err := in.drainAggregate(ctx, consumer, agg)
		outs[i].Drained = append(outs[i].Drained, drained...)
		if err != nil {
			outs[i].DrainErr = err
		}
	}
}

// lockBatch begins the batch transaction and locks the accounts of aggs
// (sorted) with one SELECT … ORDER BY id FOR UPDATE, reading their versions
// and, with parking on, their parked events, then claims the inbox keys of
// the batch: all in one round trip, the claim running under the locks.
//
// Missing accounts are created at (id, 0, 0) outside the transaction, in id
// order, by their own short statement, and the transaction starts over:
// inside it, the only row locks are then the sorted ones, so concurrent
// batches cannot deadlock each other. Once accounts exist (the steady
// state) this costs nothing.
func (in *Inbox) lockBatch(ctx context.Context, consumer string, aggs []string, claim textCols, claimV []int64) (pgx.Tx, map[string]int64, []*envelope.Event, map[string]bool, error) {
	for attempt := 0; ; attempt++ {
		tx, err := in.pool.Begin(ctx)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("begin: %w", err)
		}
		b := &pgx.Batch{}
		b.Queue(in.sql.batchLock, aggs)
		if in.opt.Parking() {
			b.Queue(in.sql.batchParked, consumer, aggs)
		}
		b.Queue(in.sql.batchInboxInsert, consumer, claim.s, claim.e, claim.a, claimV, claim.t)
		br := tx.SendBatch(ctx, b)
		cur := make(map[string]int64, len(aggs))
		rows, err := br.Query()
		if err == nil {
			var id string
			var v int64
			_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error { cur[id] = v; return nil })
		}
		var parked []*envelope.Event
		if err == nil && in.opt.Parking() {
			rows, err = br.Query()
			if err == nil {
				parked, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*envelope.Event, error) { return scanParked(r, "") })
			}
		}
		claimed := map[string]bool{}
		if err == nil {
			rows, err = br.Query()
			if err == nil {
				var s, e string
				_, err = pgx.ForEachRow(rows, []any{&s, &e}, func() error { claimed[s+" "+e] = true; return nil })
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, nil, nil, nil, rollback(ctx, tx, fmt.Errorf("lock accounts and claim inbox keys: %w", err))
		}
		if len(cur) == len(aggs) {
			return tx, cur, parked, claimed, nil
		}
		if err := tx.Rollback(ctx); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("rollback to create accounts: %w", err)
		}
		if attempt > 0 {
			return nil, nil, nil, nil, fmt.Errorf("lock accounts: %d of %d rows found after creating them", len(cur), len(aggs))
		}
		var missing []string
		for _, a := range aggs {
			if _, ok := cur[a]; !ok {
				missing = append(missing, a)
			}
		}
		if _, err := in.pool.Exec(ctx, in.sql.batchEnsure, missing); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("create accounts: %w", err)
		}
	}
}

// batchCand is an event competing for the next versions of an aggregate:
// a batch event (idx ≥ 0) or a parked one (idx < 0 unless redelivered in
// this batch).
type batchCand struct {
	ev     *envelope.Event
	idx    int
	parked bool
}

// textCols are the identity columns of events sent as arrays (t is the
// event time, part of the inbox key in the partitioned layout).
type textCols struct {
	s, e, a []string
	t       []*time.Time
}

func (c *textCols) add(ev *envelope.Event) {
	c.s, c.e, c.a = append(c.s, ev.Source), append(c.e, ev.ID), append(c.a, ev.Subject)
	c.t = append(c.t, eventTime(ev))
}

// batchTx decides and applies one chunk in one transaction. It returns the
// outcome per event index and the aggregates to drain afterwards.
func (in *Inbox) batchTx(ctx context.Context, consumer string, events []*envelope.Event, idx []int) (_ map[int]Outcome, post []string, err error) {
	aggSet := map[string]bool{}
	for _, i := range idx {
		aggSet[events[i].Subject] = true
	}
	aggs := make([]string, 0, len(aggSet))
	for a := range aggSet {
		aggs = append(aggs, a)
	}
	sort.Strings(aggs)

	// Claim inbox keys for every batch event in the same round trip as the
	// locks (the claim runs after them); the primary key says which are
	// duplicates. A redelivered parked event's claim is withdrawn below.
	var claim textCols
	var claimV []int64
	evs := make([]*envelope.Event, 0, len(idx))
	for _, i := range idx {
		claim.add(events[i])
		claimV = append(claimV, events[i].AggregateVersion)
		evs = append(evs, events[i])
	}
	// Outside the transaction; an event that cannot have a partition fails
	// the chunk, which is then redone event by event.
	if err := in.ensurePartitions(ctx, evs...); err != nil {
		return nil, nil, err
	}
	tx, cur, parkedRows, claimed, err := in.lockBatch(ctx, consumer, aggs, claim, claimV)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			err = rollback(ctx, tx, err)
		}
	}()
	parking := in.opt.Parking()
	parkedKeys := map[string]bool{}
	parkedPerAgg := map[string]int{}
	var unclaim textCols
	for _, p := range parkedRows {
		parkedKeys[p.Key()] = true
		parkedPerAgg[p.Subject]++
		if claimed[p.Key()] {
			unclaim.add(p)
		}
	}

	res := make(map[int]Outcome, len(idx))
	byAgg := map[string][]batchCand{}
	inBatch := map[string]int{}
	for _, i := range idx {
		ev := events[i]
		inBatch[ev.Key()] = i
		switch {
		case parkedKeys[ev.Key()]:
			// Redelivered while parked: it shares the parked row's fate.
		case !claimed[ev.Key()]:
			o := newOutcome(ev)
			o.Result = Duplicate
			res[i] = o
		default:
			byAgg[ev.Subject] = append(byAgg[ev.Subject], batchCand{ev: ev, idx: i})
		}
	}
	for _, p := range parkedRows {
		j, ok := inBatch[p.Key()]
		if !ok {
			j = -1
		}
		byAgg[p.Subject] = append(byAgg[p.Subject], batchCand{ev: p, idx: j, parked: true})
	}

	var (
		updID                   []string
		updDelta, updOld, updNw []int64
		unpark                  textCols
		drainIns                textCols
		drainInsV               []int64
		park                    textCols
		parkV, parkAmt          []int64
		parkKind, parkType      []string
		parkTime                []*time.Time
		drained                 = map[string][]Outcome{}
		nDrained                int64
		nParked, nOverflow      int64
	)
	for _, agg := range aggs {
		cs := byAgg[agg]
		sort.SliceStable(cs, func(i, j int) bool {
			a, b := cs[i], cs[j]
			if a.ev.AggregateVersion != b.ev.AggregateVersion {
				return a.ev.AggregateVersion < b.ev.AggregateVersion
			}
			if a.parked != b.parked {
				return a.parked // the one waiting longest wins a tie
			}
			return a.ev.Key() < b.ev.Key()
		})
		c0 := cur[agg]
		c := c0
		var delta int64
		blocked := false
		newParked := 0
		for _, cd := range cs {
			ev, v := cd.ev, cd.ev.AggregateVersion
			o := newOutcome(ev)
			switch {
			case v <= c:
				o.Result = Stale
				if cd.parked {
					unpark.add(ev)
				} else {
					unclaim.add(ev)
				}
			case v == c+1 && !blocked && !(cd.parked && ev.IdempotencyKey != ""):
				o.Result = Applied
				c, delta = v, delta+ev.Amount
				if cd.parked {
					unpark.add(ev)
					drainIns.add(ev)
					drainInsV = append(drainInsV, v)
					nDrained++
				}
			default:
				if v == c+1 && !blocked {
					// The next parked event carries an idempotency key: stop
					// here and let the shared path drain it after commit.
					blocked = true
					post = append(post, agg)
				}
				switch {
				case cd.parked:
					o.Result = Parked
				case !parking:
					o.Result = Gap
					unclaim.add(ev)
				case parkedPerAgg[agg]+newParked >= in.opt.ParkMaxPerAggregate:
					o.Result, o.ParkOverflow = Gap, true
					unclaim.add(ev)
					nOverflow++
				default:
					o.Result = Parked
					unclaim.add(ev)
					park.add(ev)
					parkV, parkAmt = append(parkV, v), append(parkAmt, ev.Amount)
					parkKind, parkType = append(parkKind, ev.Kind), append(parkType, ev.Type)
					parkTime = append(parkTime, nullTime(ev.Time))
					newParked++
				}
				if o.Result == Parked && cd.idx >= 0 {
					nParked++
				}
			}
			if cd.idx >= 0 {
				res[cd.idx] = o
			} else if o.Result != Parked {
				drained[agg] = append(drained[agg], o)
			}
		}
		if c != c0 {
			updID, updDelta, updOld, updNw = append(updID, agg), append(updDelta, delta), append(updOld, c0), append(updNw, c)
		}
	}

	// Every write in one round trip.
	b := &pgx.Batch{}
	var checks []func(n int64) error
	queue := func(what string, want int64, sql string, args ...any) {
		b.Queue(sql, args...)
		checks = append(checks, func(n int64) error {
			if want >= 0 && n != want {
				return fmt.Errorf("%s: %d rows, want %d", what, n, want)
			}
			return nil
		})
	}
	if len(unclaim.s) > 0 {
		queue("withdraw inbox claims", int64(len(unclaim.s)), in.sql.batchInboxDelete, consumer, unclaim.s, unclaim.e, unclaim.t)
	}
	if len(drainIns.s) > 0 {
		// Fewer rows means a parked event already had an inbox row; the
		// per-event fallback then reports it as DUPLICATE.
		queue("inbox rows of drained events", int64(len(drainIns.s)), in.sql.batchInboxInsert, consumer, drainIns.s, drainIns.e, drainIns.a, drainInsV, drainIns.t)
	}
	if len(updID) > 0 {
		// Every row is locked by this transaction, so each precondition
		// must hold; anything else is a bug, not a result.
		queue("update accounts", int64(len(updID)), in.sql.batchUpdate, updID, updDelta, updOld, updNw)
	}
	if len(unpark.s) > 0 {
		queue("unpark", int64(len(unpark.s)), in.sql.batchParkedDelete, consumer, unpark.s, unpark.e)
	}
	if len(park.s) > 0 {
		queue("park", -1, in.sql.batchPark, consumer, park.s, park.e, park.a, parkV, parkKind, parkAmt, parkType, parkTime)
	}
	if b.Len() > 0 {
		br := tx.SendBatch(ctx, b)
		for _, check := range checks {
			tag, err := br.Exec()
			if err == nil {
				err = check(tag.RowsAffected())
			}
			if err != nil {
				return nil, nil, errors.Join(fmt.Errorf("apply batch: %w", err), br.Close())
			}
		}
		if err := br.Close(); err != nil {
			return nil, nil, fmt.Errorf("apply batch: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("commit: %w", err)
	}
	in.counters.drained.Add(nDrained)
	in.counters.parked.Add(nParked)
	in.counters.parkOverflow.Add(nOverflow)

	// Parked events drained without a copy in this batch are reported on
	// the batch event of their aggregate that applied last.
	for agg, ds := range drained {
		best := -1
		for _, i := range idx {
			if events[i].Subject == agg && (best < 0 || res[i].Result == Applied) {
				best = i
			}
		}
		o := res[best]
		o.Drained = append(o.Drained, ds...)
		res[best] = o
	}
	return res, post, nil
}
