package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/jackc/pgx/v5/pgconn"
)

// cteStrategy applies each event with one statement in one round trip.
type cteStrategy struct{ about }

// ApplyBatch implements Strategy, one event at a time.
func (s cteStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome { return a.applyCTE(ctx, ev) })
}

// fastPath reports whether ev can take a one-statement path: plain
// increments only. Snapshots and idempotency keys take the shared
// transactional path, so their semantics live in one place.
func fastPath(ev *envelope.Event) bool {
	return ev.Kind == envelope.Increment && ev.IdempotencyKey == ""
}

// applyCTE runs the cte statement for ev, with retries.
func (a applier) applyCTE(ctx context.Context, ev *envelope.Event) Outcome {
	if err := validate(a.consumer, ev); err != nil || !fastPath(ev) {
		return a.applyOne(ctx, ev, a.defaultApplyOpts())
	}
	start := time.Now()
	var res string
	var drain bool
	attempts, err := a.retry(ctx, func(ctx context.Context) error {
		if err := a.ensurePartitions(ctx, ev); err != nil {
			return err
		}
		return a.pool.QueryRow(ctx, a.sql.cte, a.consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, ev.Amount, a.opt.Parking(), eventTime(ev)).Scan(&res, &drain)
	})
	o := a.finishFast(ctx, ev, pipeResult{done: true, result: res, drain: drain, err: err})
	o.Attempts += attempts
	o.Duration = time.Since(start)
	return o
}

// finishFast turns a one-statement result into an Outcome: IB001 (the
// update matched no row) goes to the locked decision path; an applied
// event with parked successors drains them right after its commit.
func (a applier) finishFast(ctx context.Context, ev *envelope.Event, r pipeResult) Outcome {
	if pgCode(r.err) == codeNotApplied {
		// Gap, stale, or the predecessor committed a moment ago: decide under
		// the row lock. The statement rolled back, claim included.
		a.counters.slowPath.Add(1)
		return a.applyOne(ctx, ev, applyOpts{parking: a.opt.Parking()})
	}
	out := newOutcome(ev)
	if r.err != nil {
		out.Err = eventErr(a.consumer, ev, a.strategy, r.err)
		return out
	}
	res, err := ParseResult(r.result)
	if err != nil {
		out.Err = eventErr(a.consumer, ev, a.strategy, err)
		return out
	}
	out.Result = res
	if res == Parked {
		a.counters.parked.Add(1)
	}
	if res == Applied && r.drain {
		out.Drained, out.DrainErr = a.drainAggregate(ctx, ev.Subject)
	}
	return out
}

// pipelineStrategy sends many events' cte statements in one round trip.
type pipelineStrategy struct{ about }

// PrefersBatches implements Batching.
func (pipelineStrategy) PrefersBatches() bool { return true }

// ApplyBatch implements Strategy: runs of plain increments pipelined, in
// chunks of the batch size; snapshots and keyed events through the shared
// path, in delivery order.
func (s pipelineStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	outs := make([]Outcome, len(events))
	var fast []int
	// Events are decided in delivery order: the pipelined run before a
	// slow-path event (snapshot, idempotency key) is flushed first, so an
	// aggregate's versions and a request's replays meet the inbox in the
	// order the broker delivered them.
	flush := func() {
		for start := 0; start < len(fast); start += in.opt.BatchSize {
			a.pipelineChunk(ctx, events, fast[start:min(start+in.opt.BatchSize, len(fast))], outs)
		}
		fast = fast[:0]
	}
	for i, ev := range events {
		if validate(consumer, ev) != nil || !fastPath(ev) {
			flush()
			outs[i] = a.applyOne(ctx, ev, in.defaultApplyOpts())
			continue
		}
		fast = append(fast, i)
	}
	flush()
	return outs, joinOutcomeErrors(outs)
}

type pipeResult struct {
	done   bool // the server's answer was read
	result string
	drain  bool
	err    error
}

func (a applier) pipelineChunk(ctx context.Context, events []*envelope.Event, idx []int, outs []Outcome) {
	start := time.Now()
	idx = a.ensureEach(ctx, events, idx, func(i, attempts int, err error) {
		outs[i] = newOutcome(events[i])
		outs[i].Err, outs[i].Attempts = eventErr(a.consumer, events[i], a.strategy, err), attempts
	})
	if len(idx) == 0 {
		return
	}
	res := make([]pipeResult, len(idx))
	// A transport failure leaves the unread events undecided; they are
	// redone one by one below (a committed one then reads as DUPLICATE).
	_ = a.sendPipeline(ctx, events, idx, res)
	d := time.Since(start)
	for k, i := range idx {
		ev, r := events[i], res[k]
		switch {
		case !r.done || (r.err != nil && errors.Is(classify(ctx, r.err), ErrRetryable)):
			outs[i] = a.applyCTE(ctx, ev)
			outs[i].Attempts++
		default:
			outs[i] = a.finishFast(ctx, ev, r)
			outs[i].Attempts++
			if outs[i].Duration == 0 {
				outs[i].Duration = d
			}
		}
	}
}

// cteStmtName names the prepared cte statement per SQL text, so Inboxes on
// different schemas sharing a pool do not collide.
func (in *Inbox) cteStmtName() string {
	h := sha256.Sum256([]byte(in.sql.cte))
	return "inboxbench_cte_" + hex.EncodeToString(h[:8])
}

func (a applier) sendPipeline(ctx context.Context, events []*envelope.Event, idx []int, res []pipeResult) (err error) {
	c, err := a.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer c.Release()
	sd, err := c.Conn().Prepare(ctx, a.cteStmtName(), a.sql.cte)
	if err != nil {
		return fmt.Errorf("prepare cte statement: %w", err)
	}
	parking := []byte("f")
	if a.opt.Parking() {
		parking = []byte("t")
	}
	pl := c.Conn().PgConn().StartPipeline(ctx)
	defer func() {
		if cerr := pl.Close(); cerr != nil && err == nil {
			var pe *pgconn.PgError
			if !errors.As(cerr, &pe) { // per-event errors were already recorded
				err = fmt.Errorf("close pipeline: %w", cerr)
			}
		}
	}()
	bconsumer := []byte(a.consumer)
	for _, i := range idx {
		ev := events[i]
		pl.SendQueryStatement(sd, [][]byte{bconsumer, []byte(ev.Source), []byte(ev.ID), []byte(ev.Subject),
			strconv.AppendInt(nil, ev.AggregateVersion, 10), strconv.AppendInt(nil, ev.Amount, 10), parking, eventTimeText(ev)}, nil, nil)
		// A sync point per event: each is its own implicit transaction, so
		// one event's error (or IB001) cannot undo its neighbours.
		pl.SendPipelineSync()
	}
	if err := pl.Flush(); err != nil {
		return fmt.Errorf("send pipeline: %w", err)
	}
	for k := range idx {
		r, err := pl.GetResults()
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe):
			res[k].err = err
		case err != nil:
			return fmt.Errorf("read pipeline: %w", err)
		default:
			rr, ok := r.(*pgconn.ResultReader)
			if !ok {
				return fmt.Errorf("read pipeline: unexpected %T", r)
			}
			for rr.NextRow() {
				v := rr.Values()
				if len(v) == 2 {
					res[k].result, res[k].drain = string(v[0]), string(v[1]) == "t"
				}
			}
			if _, err := rr.Close(); err != nil {
				if !errors.As(err, &pe) {
					return fmt.Errorf("read pipeline: %w", err)
				}
				res[k].err = err
			}
		}
		// Then the sync point; an error reported there (e.g. at commit)
		// belongs to this event, and the sync still follows it.
		for {
			r, err := pl.GetResults()
			if errors.As(err, &pe) {
				if res[k].err == nil {
					res[k].err = err
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("read pipeline sync: %w", err)
			}
			if _, ok := r.(*pgconn.PipelineSync); ok {
				break
			}
			return fmt.Errorf("read pipeline: unexpected %T before the sync point", r)
		}
		res[k].done = true
	}
	return nil
}
