package inbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxbench/inboxbench/external"
)

// Result is the decision for one event under one consumer.
type Result uint8

// The results; their names (String) are contracts of result files,
// strategy files and the reports. The zero value means "no decision": the
// event's Outcome carries an error instead.
const (
	NoResult  Result = iota
	Applied          // the effect committed together with the inbox row
	Duplicate        // (consumer, source, id) already took effect, or an idempotency replay
	Gap              // version ahead of the aggregate and not parked: rejected, nothing written
	Stale            // version at or below the aggregate's: rejected, nothing written
	Conflict         // idempotency key reused with a different request: rejected, nothing written
	Parked           // version ahead, held in the parked table for its predecessor
)

var resultNames = [...]string{"NONE", "APPLIED", "DUPLICATE", "GAP", "STALE", "CONFLICT", "PARKED"}

// String is the result's name: APPLIED, DUPLICATE, GAP, STALE, CONFLICT,
// PARKED, or NONE.
func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("Result(%d)", r)
}

// ParseResult is the inverse of String.
func ParseResult(s string) (Result, error) {
	for i, n := range resultNames {
		if n == s && i != 0 {
			return Result(i), nil
		}
	}
	return NoResult, fmt.Errorf("inbox: %w %q: want APPLIED, DUPLICATE, GAP, STALE, CONFLICT or PARKED", ErrUnknownResult, s)
}

// Effect reports whether the result changed business state.
func (r Result) Effect() bool { return r == Applied }

// Outcome is what happened to one event.
type Outcome struct {
	Source  string
	ID      string
	Subject string
	Version int64
	Result  Result
	// Err is set when no decision was reached (Result is NoResult); nothing
	// of the event committed, so the transport must redeliver it.
	// errors.Is(Err, ErrRetryable) tells a transient failure apart.
	Err error
	// StoredResult is the first request's stored result when the event was
	// a replay of an idempotency key (Result DUPLICATE).
	StoredResult string
	// ParkOverflow is set on a GAP caused by a full parking bound.
	ParkOverflow bool
	// DrainErr is set when the event committed but draining its parked
	// successors afterwards failed; they stay parked until the next event
	// of the aggregate or DrainParked drains them.
	DrainErr error
	// Drained lists parked events this event's commit released: applied in
	// version order (each with its own inbox row), or found stale.
	Drained []Outcome
	// Attempts counts executions (1 without retries).
	Attempts int
	// Duration is the wall time of the decision; for batch strategies,
	// that of the whole batch.
	Duration time.Duration
}

// Key returns the event identity as envelope.Event.Key does.
func (o *Outcome) Key() string { return o.Source + " " + o.ID }

// ErrRetryable marks transient failures (lock or statement timeout,
// serialization failure, deadlock, lost connection): nothing committed and
// applying the same event again may succeed.
var ErrRetryable = errors.New("retryable")

// ErrUnknownResult marks a result name that is none of the results (a
// strategy file's result column said something else).
var ErrUnknownResult = errors.New("unknown result")

// ErrInvalidEvent marks events rejected before touching the database.
var ErrInvalidEvent = errors.New("invalid event")

// ErrInjected is what tests return from Options.BeforeEffect.
var ErrInjected = errors.New("injected failure")

type retryableError struct{ err error }

// Error is the failure, marked "(retryable)".
func (e *retryableError) Error() string { return e.err.Error() + " (retryable)" }

// Unwrap is the failure.
func (e *retryableError) Unwrap() error { return e.err }

// Is matches ErrRetryable.
func (e *retryableError) Is(target error) bool { return target == ErrRetryable }

// SQLSTATEs handled specially.
const (
	codeNotApplied       = "IB001" // raised by inbox_not_applied in the cte statement
	codeLockTimeout      = "55P03"
	codeQueryCanceled    = "57014" // statement_timeout (or a cancel request)
	codeSerialization    = "40001"
	codeDeadlock         = "40P01"
	codeUniqueViolation  = "23505"
	codeCheckViolation   = "23514" // also "no partition of relation … found for row"
	codeUndefinedTable   = "42P01"
	codeConnectionClass  = "08"
	codeAdminShutdownCls = "57P"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// classify marks err retryable when applying again may help. A context
// error is never retryable: the caller gave up.
func classify(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrRetryable) {
		return err
	}
	if ctx.Err() != nil {
		return err
	}
	if external.Retryable(err) {
		// Refused, or no answer: sent again, with the same key.
		return &retryableError{err}
	}
	code := pgCode(err)
	switch {
	case code == codeLockTimeout, code == codeQueryCanceled, code == codeSerialization, code == codeDeadlock,
		len(code) == 5 && code[:2] == codeConnectionClass, len(code) == 5 && code[:3] == codeAdminShutdownCls:
		return &retryableError{err}
	case isNoPartition(err):
		// The event's partition was not there (dropped by a retention run
		// elsewhere, or never made): the next attempt ensures it first, or
		// learns that the event is beyond the retention horizon.
		return &retryableError{err}
	case code == "" && isConnError(err):
		// Retrying after a lost connection is safe even if a COMMIT's fate
		// is unknown: the inbox row makes the second attempt a DUPLICATE.
		return &retryableError{err}
	}
	return err
}

func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// retry runs f until it succeeds, fails with a non-retryable error, or
// Options.MaxAttempts executions failed retryably; it sleeps with capped
// exponential backoff and jitter between attempts. It returns the number
// of attempts.
func (in *Inbox) retry(ctx context.Context, f func(ctx context.Context) error) (int, error) {
	backoff := in.opt.RetryBackoff
	for attempt := 1; ; attempt++ {
		err := classify(ctx, f(ctx))
		if err == nil || !errors.Is(err, ErrRetryable) {
			return attempt, err
		}
		if isNoPartition(err) {
			in.part.forget()
		}
		if attempt >= in.opt.MaxAttempts {
			return attempt, fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		in.counters.retries.Add(1)
		d := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return attempt, errors.Join(err, ctx.Err())
		case <-time.After(d):
		}
		backoff = min(backoff*2, in.opt.MaxBackoff)
	}
}

// rollback ends tx after a failure. A rollback failure is joined to the
// original error, never replaces it; rollback runs even if ctx is done.
func rollback(ctx context.Context, tx pgx.Tx, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := tx.Rollback(rctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return errors.Join(cause, fmt.Errorf("rollback: %w", err))
	}
	return cause
}
