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
type batchStrategy struct{ about }

// PrefersBatches implements Batching.
func (batchStrategy) PrefersBatches() bool { return true }

// ApplyBatch implements Strategy: plain increments in chunks of the
// batch size, each chunk one transaction; snapshots and keyed events
// through the shared path after them.
func (s batchStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	outs := make([]Outcome, len(events))
	var fast, slow []int
	first := make(map[eventKey]int, len(events)) // index of each event's first copy in this call
	copies := map[int]int{}
	for i, ev := range events {
		switch {
		case validate(consumer, ev) != nil || !fastPath(ev):
			slow = append(slow, i)
		default:
			if j, ok := first[keyOf(ev)]; ok {
				copies[i] = j
				continue
			}
			first[keyOf(ev)] = i
			fast = append(fast, i)
		}
	}
	for start := 0; start < len(fast); start += in.opt.BatchSize {
		a.batchChunk(ctx, events, fast[start:min(start+in.opt.BatchSize, len(fast))], outs)
	}
	// Snapshots and keyed events after the increments: an increment waiting
	// on a snapshot in the same batch is parked, then drained by it.
	for _, i := range slow {
		outs[i] = a.applyOne(ctx, events[i], in.defaultApplyOpts())
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

func (a applier) batchChunk(ctx context.Context, events []*envelope.Event, idx []int, outs []Outcome) {
	start := time.Now()
	var res map[int]Outcome
	var post []string
	attempts, err := a.retry(ctx, func(ctx context.Context) error {
		var err error
		res, post, err = a.batchTx(ctx, events, idx)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrRetryable) || ctx.Err() != nil {
			for _, i := range idx {
				outs[i] = newOutcome(events[i])
				outs[i].Err = eventErr(a.consumer, events[i], fmt.Sprintf("batch of %d", len(idx)), err)
				outs[i].Attempts = attempts
			}
			return
		}
		// One transaction for all: a non-retryable failure cost every event
		// its decision. Redo them one by one so the others still get theirs.
		a.counters.batchFallbacks.Add(1)
		for _, i := range idx {
			outs[i] = a.applyOne(ctx, events[i], applyOpts{parking: a.opt.Parking()})
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
		drained, err := a.drainAggregate(ctx, agg)
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
func (a applier) lockBatch(ctx context.Context, aggs []string, claim textCols, claimV []int64) (pgx.Tx, map[string]int64, []*envelope.Event, map[eventKey]bool, error) {
	for attempt := 0; ; attempt++ {
		tx, err := a.pool.Begin(ctx)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("begin: %w", err)
		}
		b := &pgx.Batch{}
		b.Queue(a.sql.batchLock, aggs)
		if a.opt.Parking() {
			b.Queue(a.sql.batchParked, a.consumer, aggs)
		}
		b.Queue(a.sql.batchInboxInsert, a.consumer, claim.s, claim.e, claim.a, claimV, claim.t)
		br := tx.SendBatch(ctx, b)
		cur := make(map[string]int64, len(aggs))
		rows, err := br.Query()
		if err == nil {
			var id string
			var v int64
			_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error { cur[id] = v; return nil })
		}
		var parked []*envelope.Event
		if err == nil && a.opt.Parking() {
			rows, err = br.Query()
			if err == nil {
				parked, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*envelope.Event, error) { return scanParked(r, "") })
			}
		}
		claimed := make(map[eventKey]bool, len(claimV))
		if err == nil {
			rows, err = br.Query()
			if err == nil {
				var k eventKey
				_, err = pgx.ForEachRow(rows, []any{&k.source, &k.id}, func() error { claimed[k] = true; return nil })
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
		if _, err := a.pool.Exec(ctx, a.sql.batchEnsure, missing); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("create accounts: %w", err)
		}
	}
}

// eventKey is an event's identity as a map key (envelope.Event.Key
// without building a string).
type eventKey struct{ source, id string }

func keyOf(ev *envelope.Event) eventKey { return eventKey{ev.Source, ev.ID} }

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
func (a applier) batchTx(ctx context.Context, events []*envelope.Event, idx []int) (_ map[int]Outcome, post []string, err error) {
	aggs, claim, claimV := batchKeys(events, idx)
	// Outside the transaction; an event that cannot have a partition fails
	// the chunk, which is then redone event by event.
	evs := make([]*envelope.Event, len(idx))
	for k, i := range idx {
		evs[k] = events[i]
	}
	if err := a.ensurePartitions(ctx, evs...); err != nil {
		return nil, nil, err
	}
	tx, cur, parkedRows, claimed, err := a.lockBatch(ctx, aggs, claim, claimV)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			err = rollback(ctx, tx, err)
		}
	}()
	d := &batchDecision{in: a.Inbox, res: make(map[int]Outcome, len(idx)), drained: map[string][]Outcome{}, parkedPerAgg: map[string]int{}}
	d.w.updID, d.w.updDelta = make([]string, 0, len(aggs)), make([]int64, 0, len(aggs))
	d.w.updOld, d.w.updNew = make([]int64, 0, len(aggs)), make([]int64, 0, len(aggs))
	byAgg := d.candidates(events, idx, parkedRows, claimed)
	for _, agg := range aggs {
		d.decide(agg, cur[agg], byAgg[agg])
	}
	if err := d.write(ctx, tx, a.consumer); err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("commit: %w", err)
	}
	a.counters.drained.Add(d.nDrained)
	a.counters.parked.Add(d.nParked)
	a.counters.parkOverflow.Add(d.nOverflow)
	d.attachDrained(events, idx)
	return d.res, d.post, nil
}

// batchKeys lists a chunk's aggregates (sorted: the lock order) and the
// identity columns of its events, whose inbox keys are claimed in the same
// round trip as the locks (the claim runs after them); the primary key
// says which are duplicates.
func batchKeys(events []*envelope.Event, idx []int) (aggs []string, claim textCols, claimV []int64) {
	seen := make(map[string]bool, len(idx))
	aggs = make([]string, 0, len(idx))
	claim = textCols{s: make([]string, 0, len(idx)), e: make([]string, 0, len(idx)), a: make([]string, 0, len(idx)), t: make([]*time.Time, 0, len(idx))}
	claimV = make([]int64, 0, len(idx))
	for _, i := range idx {
		ev := events[i]
		if !seen[ev.Subject] {
			seen[ev.Subject] = true
			aggs = append(aggs, ev.Subject)
		}
		claim.add(ev)
		claimV = append(claimV, ev.AggregateVersion)
	}
	sort.Strings(aggs)
	return aggs, claim, claimV
}

// batchDecision decides a locked chunk aggregate by aggregate and collects
// the writes that carry the decisions out.
type batchDecision struct {
	in           *Inbox
	res          map[int]Outcome      // by event index
	drained      map[string][]Outcome // parked events applied without a copy in the chunk, by aggregate
	post         []string             // aggregates to drain through the shared path after commit
	parkedPerAgg map[string]int
	w            batchWrites
	nDrained     int64
	nParked      int64
	nOverflow    int64
}

// candidates sorts the chunk's claimed events and the aggregates' parked
// events into per-aggregate candidate lists; unclaimed events are
// DUPLICATE. A redelivered parked event's claim is withdrawn.
func (d *batchDecision) candidates(events []*envelope.Event, idx []int, parkedRows []*envelope.Event, claimed map[eventKey]bool) map[string][]batchCand {
	parkedKeys := make(map[eventKey]bool, len(parkedRows))
	for _, p := range parkedRows {
		parkedKeys[keyOf(p)] = true
		d.parkedPerAgg[p.Subject]++
		if claimed[keyOf(p)] {
			d.w.unclaim.add(p)
		}
	}
	byAgg := make(map[string][]batchCand, len(idx))
	inBatch := make(map[eventKey]int, len(idx))
	for _, i := range idx {
		ev := events[i]
		inBatch[keyOf(ev)] = i
		switch {
		case parkedKeys[keyOf(ev)]:
			// Redelivered while parked: it shares the parked row's fate.
		case !claimed[keyOf(ev)]:
			o := newOutcome(ev)
			o.Result = Duplicate
			d.res[i] = o
		default:
			byAgg[ev.Subject] = append(byAgg[ev.Subject], batchCand{ev: ev, idx: i})
		}
	}
	for _, p := range parkedRows {
		j, ok := inBatch[keyOf(p)]
		if !ok {
			j = -1
		}
		byAgg[p.Subject] = append(byAgg[p.Subject], batchCand{ev: p, idx: j, parked: true})
	}
	return byAgg
}

// decide walks one aggregate's candidates in version order from its
// current version c0: the next version applies, older ones are STALE,
// later ones park (or are GAP without parking or room).
func (d *batchDecision) decide(agg string, c0 int64, cs []batchCand) {
	if len(cs) > 1 { // most aggregates have one candidate
		orderCandidates(cs)
	}
	c, delta, blocked, newParked := c0, int64(0), false, 0
	for _, cd := range cs {
		ev, v := cd.ev, cd.ev.AggregateVersion
		o := newOutcome(ev)
		switch {
		case v <= c:
			o.Result = Stale
			if cd.parked {
				d.w.unpark.add(ev)
			} else {
				d.w.unclaim.add(ev)
			}
		case v == c+1 && !blocked && !(cd.parked && ev.IdempotencyKey != ""):
			o.Result = Applied
			c, delta = v, delta+ev.Amount
			if cd.parked {
				d.w.unpark.add(ev)
				d.w.drainIns.add(ev)
				d.w.drainInsV = append(d.w.drainInsV, v)
				d.nDrained++
			}
		default:
			if v == c+1 && !blocked {
				// The next parked event carries an idempotency key: stop
				// here and let the shared path drain it after commit.
				blocked = true
				d.post = append(d.post, agg)
			}
			o = d.hold(cd, o, d.parkedPerAgg[agg]+newParked)
			if o.Result == Parked && !cd.parked {
				newParked++
			}
		}
		if cd.idx >= 0 {
			d.res[cd.idx] = o
		} else if o.Result != Parked {
			d.drained[agg] = append(d.drained[agg], o)
		}
	}
	if c != c0 {
		d.w.updID, d.w.updDelta = append(d.w.updID, agg), append(d.w.updDelta, delta)
		d.w.updOld, d.w.updNew = append(d.w.updOld, c0), append(d.w.updNew, c)
	}
}

// orderCandidates sorts an aggregate's candidates for decide: by version,
// a parked one before a new one of the same version (the one waiting
// longest wins a tie), then by event key.
func orderCandidates(cs []batchCand) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.ev.AggregateVersion != b.ev.AggregateVersion {
			return a.ev.AggregateVersion < b.ev.AggregateVersion
		}
		if a.parked != b.parked {
			return a.parked
		}
		return a.ev.Key() < b.ev.Key()
	})
}

// hold decides a version-ahead candidate: a parked one stays parked; a new
// one parks when parking is on and the aggregate has room (parked
// already), else it is GAP and redelivered later.
func (d *batchDecision) hold(cd batchCand, o Outcome, parkedNow int) Outcome {
	ev := cd.ev
	switch {
	case cd.parked:
		o.Result = Parked
	case !d.in.opt.Parking():
		o.Result = Gap
		d.w.unclaim.add(ev)
	case parkedNow >= d.in.opt.ParkMaxPerAggregate:
		o.Result, o.ParkOverflow = Gap, true
		d.w.unclaim.add(ev)
		d.nOverflow++
	default:
		o.Result = Parked
		d.w.unclaim.add(ev)
		d.w.park.add(ev)
		d.w.parkV, d.w.parkAmt = append(d.w.parkV, ev.AggregateVersion), append(d.w.parkAmt, ev.Amount)
		d.w.parkKind, d.w.parkType = append(d.w.parkKind, ev.Kind), append(d.w.parkType, ev.Type)
		d.w.parkTime = append(d.w.parkTime, nullTime(ev.Time))
	}
	if o.Result == Parked && cd.idx >= 0 {
		d.nParked++
	}
	return o
}

// attachDrained reports parked events drained without a copy in the chunk
// on the chunk's event of their aggregate that applied last.
func (d *batchDecision) attachDrained(events []*envelope.Event, idx []int) {
	for agg, ds := range d.drained {
		best := -1
		for _, i := range idx {
			if events[i].Subject == agg && (best < 0 || d.res[i].Result == Applied) {
				best = i
			}
		}
		o := d.res[best]
		o.Drained = append(o.Drained, ds...)
		d.res[best] = o
	}
}

// batchWrites are every write a chunk's decisions need, as arrays.
type batchWrites struct {
	unclaim, unpark, drainIns, park textCols
	drainInsV                       []int64
	updID                           []string
	updDelta, updOld, updNew        []int64
	parkV, parkAmt                  []int64
	parkKind, parkType              []string
	parkTime                        []*time.Time
}

// write runs every write in one round trip, checking each statement's row
// count: every row is locked by this transaction, so each precondition
// must hold; anything else is a bug, not a result.
func (d *batchDecision) write(ctx context.Context, tx pgx.Tx, consumer string) error {
	sql, w := &d.in.sql, &d.w
	b := &pgx.Batch{}
	var checks []func(n int64) error
	queue := func(what string, want int64, stmt string, args ...any) {
		b.Queue(stmt, args...)
		checks = append(checks, func(n int64) error {
			if want >= 0 && n != want {
				return fmt.Errorf("%s: %d rows, want %d", what, n, want)
			}
			return nil
		})
	}
	if len(w.unclaim.s) > 0 {
		queue("withdraw inbox claims", int64(len(w.unclaim.s)), sql.batchInboxDelete, consumer, w.unclaim.s, w.unclaim.e, w.unclaim.t)
	}
	if len(w.drainIns.s) > 0 {
		// Fewer rows means a parked event already had an inbox row; the
		// per-event fallback then reports it as DUPLICATE.
		queue("inbox rows of drained events", int64(len(w.drainIns.s)), sql.batchInboxInsert, consumer, w.drainIns.s, w.drainIns.e, w.drainIns.a, w.drainInsV, w.drainIns.t)
	}
	if len(w.updID) > 0 {
		queue("update accounts", int64(len(w.updID)), sql.batchUpdate, w.updID, w.updDelta, w.updOld, w.updNew)
	}
	if len(w.unpark.s) > 0 {
		queue("unpark", int64(len(w.unpark.s)), sql.batchParkedDelete, consumer, w.unpark.s, w.unpark.e)
	}
	if len(w.park.s) > 0 {
		queue("park", -1, sql.batchPark, consumer, w.park.s, w.park.e, w.park.a, w.parkV, w.parkKind, w.parkAmt, w.parkType, w.parkTime)
	}
	if b.Len() == 0 {
		return nil
	}
	br := tx.SendBatch(ctx, b)
	for _, check := range checks {
		tag, err := br.Exec()
		if err == nil {
			err = check(tag.RowsAffected())
		}
		if err != nil {
			return errors.Join(fmt.Errorf("apply batch: %w", err), br.Close())
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("apply batch: %w", err)
	}
	return nil
}
