package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxbench/inboxbench/external"
)

// Failure says why an event was not decided, in the terms a user acts on:
// the PostgreSQL condition, the statement of a strategy file, and whether
// applying the same event again can help.
type Failure struct {
	// Kind is the PostgreSQL condition name (division_by_zero,
	// serialization_failure …), or invalid_event, beyond_retention,
	// connection, canceled, internal, or for an external call
	// external_refused, external_no_answer, external_in_progress (may
	// heal), external_key_conflict, external_stuck, external_missing.
	Kind     string
	SQLState string
	Message  string
	// Where names the strategy file statement that failed
	// (path:line @section statement N), when it was one.
	Where string
	// Retryable: applying the same event again may succeed (a lock or
	// statement timeout, a serialization failure, a deadlock, a lost
	// connection, a shutdown). Otherwise it will fail again the same way
	// (a syntax error, an undefined table, division by zero, an overflow, a
	// constraint, an invalid event) and must not be retried forever.
	Retryable bool
}

// Describe classifies err, the error of an Outcome.
func Describe(err error) Failure {
	f := Failure{Message: err.Error(), Kind: "internal", Retryable: true}
	var se *StatementError
	if errors.As(err, &se) {
		f.Where = se.where()
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		f.SQLState, f.Message = pe.Code, pe.Message
		f.Kind = conditionName(pe.Code)
		f.Retryable = retryableState(pe.Code)
	case errors.Is(err, external.ErrKeyConflict):
		f.Kind, f.Retryable = "external_key_conflict", false
	case errors.Is(err, external.ErrRefused):
		f.Kind = "external_refused"
	case errors.Is(err, external.ErrUnknownOutcome):
		f.Kind = "external_no_answer"
	case errors.Is(err, ErrInProgress):
		f.Kind = "external_in_progress"
	case errors.Is(err, ErrStuck):
		f.Kind, f.Retryable = "external_stuck", false
	case errors.Is(err, ErrNoExternal):
		f.Kind, f.Retryable = "external_missing", false
	case errors.Is(err, ErrInvalidEvent):
		f.Kind, f.Retryable = "invalid_event", false
	case errors.Is(err, ErrUnknownResult):
		f.Kind, f.Retryable = "unknown_result", false
	case errors.Is(err, ErrBeyondRetention):
		f.Kind, f.Retryable = "beyond_retention", false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		f.Kind = "canceled"
	case isConnError(err):
		f.Kind = "connection"
	}
	return f
}

// String is one line: kind (SQLSTATE): message, at where.
func (f Failure) String() string {
	var b strings.Builder
	b.WriteString(f.Kind)
	if f.SQLState != "" {
		fmt.Fprintf(&b, " (SQLSTATE %s)", f.SQLState)
	}
	b.WriteString(": " + f.Message)
	if f.Where != "" {
		b.WriteString(", at " + f.Where)
	}
	return b.String()
}

// retryableState says whether a SQLSTATE is worth another attempt.
// Permanent are data exceptions (class 22: division by zero, overflow,
// bad input), integrity violations (23) but a unique violation (a
// concurrent insert without ON CONFLICT: the retry sees the row), syntax
// and access errors (42), unsupported features (0A), invalid schema names
// (3F) and PL/pgSQL's own exceptions (P0).
func retryableState(code string) bool {
	if len(code) != 5 {
		return true
	}
	switch code[:2] {
	case "22", "42", "0A", "3F", "P0":
		return false
	case "23":
		return code == codeUniqueViolation
	}
	return true
}

// conditionName is PostgreSQL's name for a SQLSTATE (Appendix A of its
// manual), for the codes an inbox meets; others read sqlstate_XXXXX.
func conditionName(code string) string {
	if n, ok := conditionNames[code]; ok {
		return n
	}
	return "sqlstate_" + code
}

var conditionNames = map[string]string{
	"08000": "connection_exception", "08003": "connection_does_not_exist", "08006": "connection_failure",
	"0A000": "feature_not_supported",
	"22001": "string_data_right_truncation", "22003": "numeric_value_out_of_range", "22004": "null_value_not_allowed",
	"22007": "invalid_datetime_format", "22008": "datetime_field_overflow", "22012": "division_by_zero",
	"22023": "invalid_parameter_value", "22P02": "invalid_text_representation",
	"23502": "not_null_violation", "23503": "foreign_key_violation", "23505": "unique_violation", "23514": "check_violation",
	"25P02": "in_failed_sql_transaction",
	"3F000": "invalid_schema_name",
	"40001": "serialization_failure", "40P01": "deadlock_detected",
	"42501": "insufficient_privilege", "42601": "syntax_error", "42702": "ambiguous_column", "42703": "undefined_column",
	"42804": "datatype_mismatch", "42883": "undefined_function", "42P01": "undefined_table", "42P02": "undefined_parameter",
	"53100": "disk_full", "53200": "out_of_memory", "53300": "too_many_connections",
	"55P03": "lock_not_available", "57014": "query_canceled", "57P01": "admin_shutdown", "57P02": "crash_shutdown",
	"57P03": "cannot_connect_now",
	"IB001": "inbox_not_applied",
	"P0001": "raise_exception", "P0002": "no_data_found", "P0003": "too_many_rows",
	"XX000": "internal_error",
}

// StatementError is a strategy file statement's failure at run time.
type StatementError struct {
	Path    string
	Line    int
	Section string
	Index   int
	Err     error
}

// where is "path:line @section statement n".
func (e *StatementError) where() string {
	return fmt.Sprintf("%s:%d @%s statement %d", e.Path, e.Line, e.Section, e.Index)
}

// Error names the file, line, section and statement, then the server's
// error.
func (e *StatementError) Error() string { return e.where() + ": " + e.Err.Error() }

// Unwrap is the server's error.
func (e *StatementError) Unwrap() error { return e.Err }
