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
type cteStrategy struct{}

func (cteStrategy) Name() string { return "cte" }
func (cteStrategy) Description() string {
	return "one statement per event: a data-modifying CTE claims the inbox key, applies the conditional update and returns the outcome (autocommit, one round trip)"
}
func (cteStrategy) Broken() bool { return false }
func (cteStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome { return in.applyCTE(ctx, "cte", consumer, ev) })
}

// fastPath reports whether ev can take a one-statement path: plain
// increments only. Snapshots and idempotency keys take the shared
// transactional path, so their semantics live in one place.
func fastPath(ev *envelope.Event) bool {
	return ev.Kind == envelope.Increment && ev.IdempotencyKey == ""
}

// applyCTE runs the cte statement for ev, with retries.
func (in *Inbox) applyCTE(ctx context.Context, strategy, consumer string, ev *envelope.Event) Outcome {
	if err := validate(consumer, ev); err != nil || !fastPath(ev) {
		return in.applyOne(ctx, strategy, consumer, ev, in.defaultApplyOpts())
	}
	start := time.Now()
	var res string
	var drain bool
	attempts, err := in.retry(ctx, func(ctx context.Context) error {
		if err := in.ensurePartitions(ctx, ev); err != nil {
			return err
		}
		return in.pool.QueryRow(ctx, in.sql.cte, consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, ev.Amount, in.opt.Parking(), eventTime(ev)).Scan(&res, &drain)
	})
	o := in.finishFast(ctx, strategy, consumer, ev, pipeResult{done: true, result: res, drain: drain, err: err})
	o.Attempts += attempts
	o.Duration = time.Since(start)
	return o
}

// finishFast turns a one-statement result into an Outcome: IB001 (the
// update matched no row) goes to the locked decision path; an applied
// event with parked successors drains them right after its commit.
func (in *Inbox) finishFast(ctx context.Context, strategy, consumer string, ev *envelope.Event, r pipeResult) Outcome {
	if pgCode(r.err) == codeNotApplied {
		// Gap, stale, or the predecessor committed a moment ago: decide under
		// the row lock. The statement rolled back, claim included.
		in.counters.slowPath.Add(1)
		o := in.applyOne(ctx, strategy, consumer, ev, applyOpts{parking: in.opt.Parking()})
		return o
	}
	out := newOutcome(ev)
	if r.err != nil {
		out.Err = eventErr(consumer, ev, strategy, r.err)
		return out
	}
	res, err := ParseResult(r.result)
	if err != nil {
		out.Err = eventErr(consumer, ev, strategy, err)
		return out
	}
	out.Result = res
	if res == Parked {
		in.counters.parked.Add(1)
	}
	if res == Applied && r.drain {
		out.Drained, out.DrainErr = in.drainAggregate(ctx, consumer, ev.Subject)
	}
	return out
}

// pipelineStrategy sends many events' cte statements in one round trip.
type pipelineStrategy struct{}

func (pipelineStrategy) Name() string { return "pipeline" }
func (pipelineStrategy) Description() string {
	return "the cte statement for many events in one round trip (libpq pipeline mode), a sync point after each so every event is its own transaction"
}
func (pipelineStrategy) Broken() bool { return false }

// PrefersBatches implements Batching.
func (pipelineStrategy) PrefersBatches() bool { return true }
func (pipelineStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	outs := make([]Outcome, len(events))
	var fast []int
	// Events are decided in delivery order: the pipelined run before a
	// slow-path event (snapshot, idempotency key) is flushed first, so an
	// aggregate's versions and a request's replays meet the inbox in the
	// order the broker delivered them.
	flush := func() {
		for start := 0; start < len(fast); start += in.opt.BatchSize {
			in.pipelineChunk(ctx, consumer, events, fast[start:min(start+in.opt.BatchSize, len(fast))], outs)
		}
		fast = fast[:0]
	}
	for i, ev := range events {
		if validate(consumer, ev) != nil || !fastPath(ev) {
			flush()
			outs[i] = in.applyOne(ctx, "pipeline", consumer, ev, in.defaultApplyOpts())
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

func (in *Inbox) pipelineChunk(ctx context.Context, consumer string, events []*envelope.Event, idx []int, outs []Outcome) {
	start := time.Now()
	idx = in.ensureEach(ctx, events, idx, func(i, attempts int, err error) {
		outs[i] = newOutcome(events[i])
		outs[i].Err, outs[i].Attempts = eventErr(consumer, events[i], "pipeline", err), attempts
	})
	if len(idx) == 0 {
		return
	}
	res := make([]pipeResult, len(idx))
	// A transport failure leaves the unread events undecided; they are
	// redone one by one below (a committed one then reads as DUPLICATE).
	_ = in.sendPipeline(ctx, consumer, events, idx, res)
	d := time.Since(start)
	for k, i := range idx {
		ev, r := events[i], res[k]
		switch {
		case !r.done || (r.err != nil && errors.Is(classify(ctx, r.err), ErrRetryable)):
			outs[i] = in.applyCTE(ctx, "pipeline", consumer, ev)
			outs[i].Attempts++
		default:
			outs[i] = in.finishFast(ctx, "pipeline", consumer, ev, r)
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

func (in *Inbox) sendPipeline(ctx context.Context, consumer string, events []*envelope.Event, idx []int, res []pipeResult) (err error) {
	c, err := in.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer c.Release()
	sd, err := c.Conn().Prepare(ctx, in.cteStmtName(), in.sql.cte)
	if err != nil {
		return fmt.Errorf("prepare cte statement: %w", err)
	}
	parking := []byte("f")
	if in.opt.Parking() {
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
	bconsumer := []byte(consumer)
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
