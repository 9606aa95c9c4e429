package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/envelope"
)

// outcome: batch — a strategy file's @batch statements apply a whole batch
// of events in one transaction, as a team's production batch SQL would:
// every event parameter is bound as an array over the batch (in delivery
// order), :ordinal numbers the events 1..n, and the last statement
// returns one row per event with its ordinal and its result. The harness
// hands such a file batches of up to the workload's batch size, as it does
// the built-in batch strategy, and parks the events it answers GAP.

// applyBatchSQL applies events with the @batch statements, in chunks of
// the inbox's batch size; a chunk that fails for good is redone event by
// event, so one bad event does not cost its neighbours their decision.
func (s *FileStrategy) applyBatchSQL(ctx context.Context, in *Inbox, r *fileSQL, consumer string, events []*envelope.Event) []Outcome {
	outs := make([]Outcome, len(events))
	var ok []int
	for i, ev := range events {
		if err := validate(consumer, ev); err != nil {
			outs[i] = Outcome{Err: err}
			if ev != nil {
				outs[i] = newOutcome(ev)
				outs[i].Err = err
			}
			continue
		}
		ok = append(ok, i)
	}
	for start := 0; start < len(ok); start += in.opt.BatchSize {
		s.batchChunk(ctx, in, r, consumer, events, ok[start:min(start+in.opt.BatchSize, len(ok))], outs)
	}
	return outs
}

func (s *FileStrategy) batchChunk(ctx context.Context, in *Inbox, r *fileSQL, consumer string, events []*envelope.Event, idx []int, outs []Outcome) {
	evs := make([]*envelope.Event, len(idx))
	for k, i := range idx {
		evs[k] = events[i]
	}
	start := time.Now()
	var res []string
	var last *renderedStmt
	attempts, err := in.retry(ctx, func(ctx context.Context) error {
		if err := in.ensurePartitions(ctx, evs...); err != nil {
			return err
		}
		var err error
		res, last, err = s.runBatch(ctx, in, r, consumer, evs)
		return err
	})
	if err != nil && len(idx) > 1 && !errors.Is(err, ErrRetryable) && ctx.Err() == nil {
		for _, i := range idx {
			s.batchChunk(ctx, in, r, consumer, events, []int{i}, outs)
		}
		return
	}
	d := time.Since(start)
	for k, i := range idx {
		o := newOutcome(events[i])
		o.Attempts, o.Duration = attempts, d
		switch {
		case err != nil:
			o.Err = eventErr(consumer, events[i], s.Name(), s.stmtErr(last, err))
		default:
			rr, perr := ParseResult(res[k])
			if perr != nil {
				o.Err = eventErr(consumer, events[i], s.Name(), s.stmtErr(last, perr))
			}
			o.Result = rr
		}
		outs[i] = o
	}
}

// runBatch runs the @batch statements once, in one transaction, and
// returns each event's result in batch order.
func (s *FileStrategy) runBatch(ctx context.Context, in *Inbox, r *fileSQL, consumer string, evs []*envelope.Event) ([]string, *renderedStmt, error) {
	res := make([]string, len(evs))
	last := r.batch[len(r.batch)-1]
	err := pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		for _, st := range r.batch[:len(r.batch)-1] {
			if _, err := tx.Exec(ctx, st.sql, batchArgs(st, consumer, evs)...); err != nil {
				last = st
				return err
			}
		}
		rows, err := tx.Query(ctx, last.sql, batchArgs(last, consumer, evs)...)
		if err != nil {
			return err
		}
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
			return err
		}
		for k, v := range res {
			if v == "" {
				return fmt.Errorf("%w: no row for ordinal %d (%s)", ErrUnknownResult, k+1, evs[k].ID)
			}
		}
		return nil
	})
	return res, last, err
}

// batchArgs binds a @batch statement's parameters for a batch, in $n
// order: each an array over the events, :consumer a scalar.
func batchArgs(st *renderedStmt, consumer string, evs []*envelope.Event) []any {
	args := make([]any, len(st.names))
	for i, n := range st.names {
		if n == "consumer" {
			args[i] = consumer
			continue
		}
		args[i] = column(n, evs)
	}
	return args
}

// column is one parameter's values over a batch.
func column(name string, evs []*envelope.Event) any {
	text := func(f func(*envelope.Event) string) []string {
		out := make([]string, len(evs))
		for i, e := range evs {
			out[i] = f(e)
		}
		return out
	}
	num := func(f func(int, *envelope.Event) int64) []int64 {
		out := make([]int64, len(evs))
		for i, e := range evs {
			out[i] = f(i, e)
		}
		return out
	}
	switch name {
	case "ordinal":
		return num(func(i int, _ *envelope.Event) int64 { return int64(i + 1) })
	case "source":
		return text(func(e *envelope.Event) string { return e.Source })
	case "event_id":
		return text(func(e *envelope.Event) string { return e.ID })
	case "event_type":
		return text(func(e *envelope.Event) string { return e.Type })
	case "aggregate_id":
		return text(func(e *envelope.Event) string { return e.Subject })
	case "kind":
		return text(func(e *envelope.Event) string { return e.Kind })
	case "idempotency_key":
		return text(func(e *envelope.Event) string { return e.IdempotencyKey })
	case "tenant":
		return text(func(e *envelope.Event) string { return e.Tenant })
	case "operation":
		return text(func(e *envelope.Event) string { return e.Operation })
	case "request_hash":
		return text(RequestHash)
	case "version":
		return num(func(_ int, e *envelope.Event) int64 { return e.AggregateVersion })
	case "amount":
		return num(func(_ int, e *envelope.Event) int64 { return e.Amount })
	case "event_time":
		out := make([]*time.Time, len(evs))
		for i, e := range evs {
			out[i] = nullTime(e.Time)
		}
		return out
	}
	return nil
}
