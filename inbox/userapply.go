package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox/strategyfile"
)

// The apply paths of strategy files: one event per transaction as the
// file's outcome mode says (here), a batch per transaction (userbatch.go),
// and parking (userpark.go).

// fileRun is one ApplyBatch (or drain) of a file: the statements rendered
// for the inbox's tables and the consumer they apply for. The apply paths
// are its methods.
type fileRun struct {
	s        *FileStrategy
	in       *Inbox
	sql      *fileSQL
	consumer string
}

// ApplyBatch applies the events with the file's SQL: each in its own
// transaction as the file's outcome mode says, or (outcome: batch) the
// whole batch in one. With parking on, a version-ahead event the file
// answers GAP is parked by the harness and applied again with the file's
// SQL once its predecessor applied (userpark.go).
func (s *FileStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	r, err := s.run(ctx, in, consumer)
	if err != nil {
		outs, _ := perEvent(events, func(ev *envelope.Event) Outcome {
			if o, bad := invalid(consumer, ev); bad {
				return o
			}
			return r.failed(ev, err, 0)
		})
		return outs, joinOutcomeErrors(outs)
	}
	var outs []Outcome
	var swept map[string]bool
	if s.f.Header.Outcome == strategyfile.OutcomeBatch {
		outs, swept = r.batch(ctx, events, in.opt.Parking())
	} else {
		outs, _ = perEvent(events, func(ev *envelope.Event) Outcome { return r.event(ctx, ev) })
	}
	// A file with an external step does not park, as the built-in
	// external strategies do not: a drained event would take effect
	// without its call.
	if in.opt.Parking() && s.f.Header.External == "" {
		r.parkAndDrain(ctx, events, outs, swept)
	}
	return outs, joinOutcomeErrors(outs)
}

// run returns the file's run for in's tables and consumer, preparing the
// schema first if nobody did (a library caller that went straight to
// Apply): the DDL must have run and the parameter types must be known. On
// an error the run is still good for reporting it.
func (s *FileStrategy) run(ctx context.Context, in *Inbox, consumer string) (*fileRun, error) {
	r := &fileRun{s: s, in: in, consumer: consumer}
	k := tableKey{in.Schema(), in.opt.AccountTable}
	s.mu.Lock()
	done := s.prepared[k]
	s.mu.Unlock()
	if !done {
		if err := s.prepare(ctx, in.pool, k); err != nil {
			return r, err
		}
	}
	r.sql = s.sqlFor(k)
	return r, nil
}

// invalid is the outcome of an event that cannot be applied at all (nil,
// or missing what identifies it); bad is false for a valid event.
func invalid(consumer string, ev *envelope.Event) (o Outcome, bad bool) {
	err := validate(consumer, ev)
	if err == nil {
		return Outcome{}, false
	}
	o = Outcome{Err: err}
	if ev != nil {
		o = newOutcome(ev)
		o.Err = err
	}
	return o, true
}

// failed is the outcome of an event the file did not decide.
func (r *fileRun) failed(ev *envelope.Event, err error, attempts int) Outcome {
	o := newOutcome(ev)
	o.Err, o.Attempts = eventErr(r.consumer, ev, r.s.Name(), err), attempts
	return o
}

// event applies one event with the per-event sections (or a batch of
// one), in its own transaction.
func (r *fileRun) event(ctx context.Context, ev *envelope.Event) Outcome {
	if o, bad := invalid(r.consumer, ev); bad {
		return o
	}
	// On a partitioned inbox the file's SQL must write event_time; the
	// partition it lands in is made here, as for the built-ins.
	if attempts, err := r.in.retry(ctx, func(ctx context.Context) error { return r.in.ensurePartitions(ctx, ev) }); err != nil {
		return r.failed(ev, err, attempts)
	}
	start := time.Now()
	var o Outcome
	switch h := r.s.f.Header; {
	case h.Outcome == strategyfile.OutcomeBatch:
		// The parking code calls this for one event and keeps the parked
		// table itself: no sweep.
		outs, _ := r.batch(ctx, []*envelope.Event{ev}, false)
		o = outs[0]
	case h.Outcome == strategyfile.OutcomeResult:
		o = r.result(ctx, ev)
	case h.Transaction == strategyfile.TxSplit:
		o = r.split(ctx, ev)
	default:
		o = r.rows(ctx, ev)
	}
	o.Duration = time.Since(start)
	return o
}

// errNotDecided is returned inside a retry loop when the SQL raised IB001
// and the version read says the predecessor committed meanwhile.
var errNotDecided = errors.New("not decided")

// result runs the @apply statements and reads the result column. One
// statement runs on its own (autocommit, one round trip, like the cte
// strategy); several run in one transaction. Whatever the result, what
// the SQL wrote commits: it is the SQL under test, and the checker judges
// it. SQLSTATE IB001 (raised by {{schema}}.inbox_not_applied) rolls the
// statement back and leaves the decision to the account's version.
func (r *fileRun) result(ctx context.Context, ev *envelope.Event) Outcome {
	var res string
	var last *renderedStmt
	attempts, err := r.in.retry(ctx, func(ctx context.Context) error {
		for try := 0; ; try++ {
			var err error
			res, last, err = r.runApply(ctx, ev)
			if pgCode(err) != codeNotApplied {
				return err
			}
			// Not applied and rolled back: stale, a gap, or the
			// predecessor committed after the statement's snapshot.
			var cur int64
			if err := r.in.pool.QueryRow(ctx, r.in.sql.accountLock, ev.Subject).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("read version of %s after IB001: %w", ev.Subject, err)
			}
			switch v := ev.AggregateVersion; {
			case v <= cur:
				res = Stale.String()
				return nil
			case v > cur+1:
				res = Gap.String()
				return nil
			case try >= 2:
				return fmt.Errorf("%w: %s is at version %d, yet the statement did not apply version %d (IB001) three times", errNotDecided, ev.Subject, cur, v)
			}
		}
	})
	if err == nil {
		var rr Result
		if rr, err = ParseResult(res); err == nil {
			out := newOutcome(ev)
			out.Result, out.Attempts = rr, attempts
			if rr == Parked {
				r.in.counters.parked.Add(1)
			}
			return out
		}
	}
	return r.failed(ev, r.s.stmtErr(last, err), attempts)
}

// runApply executes the @apply statements once; it returns the result
// column of the last one and the statement that failed or answered.
func (r *fileRun) runApply(ctx context.Context, ev *envelope.Event) (string, *renderedStmt, error) {
	apply := r.sql[strategyfile.Apply]
	last := apply[len(apply)-1]
	if len(apply) == 1 {
		res, err := queryResult(ctx, r.in.pool, last, eventArgs(last, r.consumer, ev))
		return res, last, err
	}
	tx, err := r.in.pool.Begin(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("begin: %w", err)
	}
	for _, st := range apply[:len(apply)-1] {
		if _, err := tx.Exec(ctx, st.SQL, eventArgs(st, r.consumer, ev)...); err != nil {
			return "", st, rollback(ctx, tx, err)
		}
	}
	res, err := queryResult(ctx, tx, last, eventArgs(last, r.consumer, ev))
	if err != nil {
		return "", last, rollback(ctx, tx, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return "", last, fmt.Errorf("commit: %w", err)
	}
	return res, last, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryResult runs st with args and returns its result column from
// exactly one row.
func queryResult(ctx context.Context, q querier, st *renderedStmt, args []any) (string, error) {
	rows, err := q.Query(ctx, st.SQL, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	idx := -1
	for i, fd := range rows.FieldDescriptions() {
		if fd.Name == "result" {
			idx = i
			break
		}
	}
	var res *string
	n := 0
	for rows.Next() {
		n++
		if n > 1 || idx < 0 {
			continue
		}
		vals, err := rows.Values()
		if err != nil {
			return "", err
		}
		if v, ok := vals[idx].(string); ok {
			res = &v
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	switch {
	case idx < 0:
		return "", errors.New("the statement returned no result column")
	case n != 1:
		return "", fmt.Errorf("the statement returned %d rows: want exactly one row with the result column", n)
	case res == nil:
		return "", errors.New("the result column is NULL or not text")
	}
	return *res, nil
}

// execEffect runs the @effect statements and counts the rows they
// changed: INSERT, UPDATE, DELETE and MERGE count; a SELECT (a lookup, a
// function call) does not.
func (r *fileRun) execEffect(ctx context.Context, tx pgx.Tx, ev *envelope.Event) (int64, *renderedStmt, error) {
	var n int64
	for _, st := range r.sql[strategyfile.Effect] {
		tag, err := tx.Exec(ctx, st.SQL, eventArgs(st, r.consumer, ev)...)
		if err != nil {
			return 0, st, err
		}
		if tag.Insert() || tag.Update() || tag.Delete() || strings.HasPrefix(tag.String(), "MERGE") {
			n += tag.RowsAffected()
		}
	}
	return n, nil, nil
}

// decideEffect is the article's rule after the claim succeeded, in tx: the
// effect changing one row is APPLIED; none, the version (read under the
// account's row lock) says STALE or GAP, or, when the predecessor just
// committed, the effect is tried again. commit reports whether to commit.
func (r *fileRun) decideEffect(ctx context.Context, tx pgx.Tx, ev *envelope.Event) (res Result, commit bool, err error) {
	path := r.s.f.Path
	if r.in.opt.BeforeEffect != nil {
		if err := r.in.opt.BeforeEffect(ctx, r.consumer, ev); err != nil {
			return NoResult, false, fmt.Errorf("before effect: %w", err)
		}
	}
	for try := 0; ; try++ {
		n, st, err := r.execEffect(ctx, tx, ev)
		if err != nil {
			return NoResult, false, r.s.stmtErr(st, err)
		}
		switch {
		case n == 1:
			return Applied, true, nil
		case n > 1:
			return NoResult, false, fmt.Errorf("strategy file %s: @effect changed %d rows for one event: want 1 (applied) or 0 (not applied)", path, n)
		}
		// The lock orders this read after a predecessor's commit. Unlike
		// the built-in path, a missing account is not created: the file's
		// SQL alone writes business rows.
		var cur int64
		if err := tx.QueryRow(ctx, r.in.sql.accountLock, ev.Subject).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return NoResult, false, fmt.Errorf("read version of %s: %w", ev.Subject, err)
		}
		switch v := ev.AggregateVersion; {
		case v <= cur:
			return Stale, false, nil
		case v > cur+1:
			return Gap, false, nil
		case try >= 2:
			return NoResult, false, fmt.Errorf("strategy file %s: %s is at version %d under lock, yet @effect changed no row for version %d", path, ev.Subject, cur, v)
		}
	}
}

func (s *FileStrategy) stmtErr(st *renderedStmt, err error) error {
	if st == nil {
		return err
	}
	return &StatementError{Path: s.f.Path, Line: s.f.Line(st.Off), Section: st.Section.String(), Index: st.Index, Err: err}
}

// rows is the article's transaction: claim, then effect, in one
// transaction; anything but APPLIED rolls back, claim included.
func (r *fileRun) rows(ctx context.Context, ev *envelope.Event) Outcome {
	claim := r.sql[strategyfile.Claim][0]
	var out Outcome
	attempts, err := r.in.retry(ctx, func(ctx context.Context) error {
		var err error
		out, err = r.in.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
			o := newOutcome(ev)
			tag, err := tx.Exec(ctx, claim.SQL, eventArgs(claim, r.consumer, ev)...)
			if err != nil {
				return o, false, r.s.stmtErr(claim, err)
			}
			if tag.RowsAffected() == 0 {
				o.Result = Duplicate
				return o, false, nil
			}
			res, commit, err := r.decideEffect(ctx, tx, ev)
			o.Result = res
			if err == nil && commit && r.s.f.Header.External != "" {
				err = r.callExternal(ctx, tx, ev)
			}
			return o, commit, err
		})
		return err
	})
	if err != nil {
		return r.failed(ev, err, attempts)
	}
	out.Attempts = attempts
	return out
}

// callExternal is the file's external step, in the event's transaction
// after @effect applied: its @external statement says what to send (no
// row: nothing), the harness sends it, and the transaction commits only
// after the service answered. A failed call rolls the event back and it
// is tried again, with the key the statement gives again.
func (r *fileRun) callExternal(ctx context.Context, tx pgx.Tx, ev *envelope.Event) error {
	st := r.sql[strategyfile.External][0]
	rows, err := tx.Query(ctx, st.SQL, eventArgs(st, r.consumer, ev)...)
	if err != nil {
		return r.s.stmtErr(st, err)
	}
	var key *string
	var amount int64
	n := 0
	for rows.Next() {
		if n++; n == 1 {
			vals, err := rows.Values()
			if err != nil {
				rows.Close()
				return r.s.stmtErr(st, err)
			}
			for i, fd := range rows.FieldDescriptions() {
				switch fd.Name {
				case "request_key":
					if k, ok := vals[i].(string); ok {
						key = &k
					}
				case "amount":
					if a, ok := vals[i].(int64); ok {
						amount = a
					} else if a, ok := vals[i].(int32); ok {
						amount = int64(a)
					}
				}
			}
		}
	}
	rows.Close()
	switch {
	case rows.Err() != nil:
		return r.s.stmtErr(st, rows.Err())
	case n == 0:
		return nil
	case n > 1:
		return r.s.stmtErr(st, fmt.Errorf("the @external statement returned %d rows: want at most one (the request to send)", n))
	}
	req := ExternalRequest("", ev)
	if key != nil {
		req.Key = *key
	}
	req.Amount = amount
	if _, err := r.in.pay(ctx, req); err != nil {
		return err
	}
	return r.in.afterCall(ctx, r.consumer, ev)
}

// split reproduces the article's split commit for negative controls: the
// claim commits on its own, then the effect runs in a second transaction
// that may roll back, leaving the claim behind. One attempt, like the
// built-in negative controls: a control must not retry its own failure
// away.
func (r *fileRun) split(ctx context.Context, ev *envelope.Event) Outcome {
	out := newOutcome(ev)
	out.Attempts = 1
	fail := func(err error) Outcome { return r.failed(ev, classify(ctx, err), 1) }
	claim := r.sql[strategyfile.Claim][0]
	tag, err := r.in.pool.Exec(ctx, claim.SQL, eventArgs(claim, r.consumer, ev)...)
	if err != nil {
		return fail(r.s.stmtErr(claim, err))
	}
	if tag.RowsAffected() == 0 {
		out.Result = Duplicate
		return out
	}
	tx, err := r.in.pool.Begin(ctx)
	if err != nil {
		return fail(fmt.Errorf("begin: %w", err))
	}
	res, commit, err := r.decideEffect(ctx, tx, ev)
	if err != nil {
		return fail(rollback(ctx, tx, err))
	}
	if !commit {
		if err := tx.Rollback(ctx); err != nil {
			return fail(fmt.Errorf("rollback after %s: %w", res, err))
		}
		out.Result = res
		return out
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	out.Result = res
	return out
}

// Prune runs the file's @prune statements (retention) in in's schema with
// :before and :limit, and returns the rows they deleted. A file without
// @prune returns 0 and no error: the built-in `bench inbox prune` applies.
func (s *FileStrategy) Prune(ctx context.Context, in *Inbox, before time.Time, limit int64) (int64, error) {
	var total int64
	for _, st := range s.sqlFor(tableKey{in.Schema(), in.opt.AccountTable})[strategyfile.Prune] {
		tag, err := in.pool.Exec(ctx, st.SQL, pruneArgs(st, before, limit)...)
		if err != nil {
			return total, s.stmtErr(st, err)
		}
		total += tag.RowsAffected()
	}
	return total, nil
}
