package inbox

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
)

// fileParam is one named parameter of strategy files: what it carries,
// and how it is bound in each kind of section that may use it (nil where
// it may not). Values are bound with their Go types (text, bigint,
// timestamptz); a file casts where PostgreSQL cannot infer a type.
type fileParam struct {
	name string
	doc  string
	// event binds it for one event (@apply, @claim, @effect, @external).
	event func(consumer string, ev *envelope.Event) any
	// batch binds it for a batch (@batch): an array over the events in
	// delivery order, or one value for the whole batch.
	batch func(consumer string, evs []*envelope.Event) any
	// prune binds it for @prune.
	prune func(before time.Time, limit int64) any
}

// fileParams are every parameter a strategy file may use: the one table
// that checking a file, binding its statements and the messages about
// unknown parameters read. examples/strategies/README.md documents the
// same names (a test keeps the two alike).
var fileParams = []*fileParam{
	{name: "consumer", doc: "the consumer name (text): the processing responsibility, first part of the inbox key",
		event: func(c string, _ *envelope.Event) any { return c },
		batch: func(c string, _ []*envelope.Event) any { return c }},
	eventParam("source", "the event's CloudEvents source (text)", func(e *envelope.Event) string { return e.Source }),
	eventParam("event_id", "the event's CloudEvents id (text); (source, event_id) is the identity", func(e *envelope.Event) string { return e.ID }),
	eventParam("event_type", "the event's CloudEvents type (text)", func(e *envelope.Event) string { return e.Type }),
	eventParam("event_time", "the event's occurrence time (timestamptz, NULL when absent)", func(e *envelope.Event) *time.Time { return nullTime(e.Time) }),
	eventParam("aggregate_id", "the aggregate (account) id, the CloudEvents subject (text)", func(e *envelope.Event) string { return e.Subject }),
	eventParam("version", "the aggregate version the event carries (bigint)", func(e *envelope.Event) int64 { return e.AggregateVersion }),
	eventParam("amount", "the increment, or the full balance of a snapshot (bigint)", func(e *envelope.Event) int64 { return e.Amount }),
	eventParam("kind", "'increment' or 'snapshot' (text)", func(e *envelope.Event) string { return e.Kind }),
	eventParam("idempotency_key", "the client idempotency key, '' when absent (text)", func(e *envelope.Event) string { return e.IdempotencyKey }),
	eventParam("tenant", "the idempotency key's tenant, '' when absent (text)", func(e *envelope.Event) string { return e.Tenant }),
	eventParam("operation", "the idempotency key's operation, '' when absent (text)", func(e *envelope.Event) string { return e.Operation }),
	eventParam("request_hash", "hex SHA-256 of the request content (tenant, operation, subject, kind, amount) for idempotency conflicts (text)", RequestHash),
	{name: "ordinal", doc: "the events' positions in the batch, 1..n (int[]); the last statement returns one row per ordinal",
		batch: func(_ string, evs []*envelope.Event) any {
			out := make([]int64, len(evs))
			for i := range out {
				out[i] = int64(i + 1)
			}
			return out
		}},
	{name: "before", doc: "delete inbox rows applied before this time (timestamptz)",
		prune: func(before time.Time, _ int64) any { return before }},
	{name: "limit", doc: "delete at most this many rows per statement (bigint)",
		prune: func(_ time.Time, limit int64) any { return limit }},
}

// eventParam is a parameter taken from the event: one value per event,
// an array over a batch's events in @batch.
func eventParam[T any](name, doc string, of func(*envelope.Event) T) *fileParam {
	return &fileParam{name: name, doc: doc,
		event: func(_ string, ev *envelope.Event) any { return of(ev) },
		batch: func(_ string, evs []*envelope.Event) any {
			out := make([]T, len(evs))
			for i, e := range evs {
				out[i] = of(e)
			}
			return out
		}}
}

// allowedIn reports whether the parameter may be used in section s.
func (p *fileParam) allowedIn(s sectionID) bool {
	switch s {
	case secApply, secClaim, secEffect, secExternal:
		return p.event != nil
	case secBatch:
		return p.batch != nil
	case secPrune:
		return p.prune != nil
	}
	return false // @ddl runs once per schema, before any event
}

// sectionsOf lists where p may be used, for messages.
func (p *fileParam) sectionsOf() []string {
	var out []string
	for s := range numSections {
		if p.allowedIn(s) {
			out = append(out, "@"+s.String())
		}
	}
	return out
}

// paramList lists the parameters section s may use: ":a, :b, …".
func paramList(s sectionID) string {
	var names []string
	for _, p := range fileParams {
		if p.allowedIn(s) {
			names = append(names, ":"+p.name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// checkParams checks every parameter against its section and records how
// each statement's parameters are bound, in $n order.
func (f *parsedFile) checkParams() error {
	for s, stmts := range f.sections {
		for _, st := range stmts {
			for _, ref := range st.params {
				i := slices.IndexFunc(fileParams, func(p *fileParam) bool { return p.name == ref.name })
				if i >= 0 && fileParams[i].allowedIn(sectionID(s)) {
					if !slices.Contains(st.args, fileParams[i]) {
						st.args = append(st.args, fileParams[i])
					}
					continue
				}
				e := f.stmtErrAt(st, ref.start, "")
				e.Param = ref.name
				switch {
				case sectionID(s) == secDDL:
					e.Msg = "@ddl takes no parameters (it runs once, before any event)"
				case i >= 0:
					p := fileParams[i]
					e.Msg = "not a parameter of @" + sectionID(s).String() + ", only of " + orList(p.sectionsOf(), "and") + " (" + p.doc + "): known here are " + paramList(sectionID(s))
				default:
					e.Msg = "unknown parameter: known are " + paramList(sectionID(s))
				}
				return e
			}
		}
	}
	return nil
}

// num is the $n of the parameter named name in st.
func (st *fileStmt) num(name string) int {
	return 1 + slices.IndexFunc(st.args, func(p *fileParam) bool { return p.name == name })
}

// eventArgs binds a statement's parameters for one event, in $n order.
func eventArgs(st *renderedStmt, consumer string, ev *envelope.Event) []any {
	args := make([]any, len(st.args))
	for i, p := range st.args {
		args[i] = p.event(consumer, ev)
	}
	return textArgs(st, args)
}

// batchArgs binds a @batch statement's parameters for a batch, in $n
// order.
func batchArgs(st *renderedStmt, consumer string, evs []*envelope.Event) []any {
	args := make([]any, len(st.args))
	for i, p := range st.args {
		args[i] = p.batch(consumer, evs)
	}
	return args
}

// pruneArgs binds a @prune statement's parameters, in $n order.
func pruneArgs(st *renderedStmt, before time.Time, limit int64) []any {
	args := make([]any, len(st.args))
	for i, p := range st.args {
		args[i] = p.prune(before, limit)
	}
	return textArgs(st, args)
}

// textArgs sends numbers and times as text where the server typed the
// parameter as text.
func textArgs(st *renderedStmt, args []any) []any {
	for i, a := range args {
		if i >= len(st.asText) || !st.asText[i] {
			continue
		}
		switch v := a.(type) {
		case int64:
			args[i] = strconv.FormatInt(v, 10)
		case time.Time:
			args[i] = v.Format(time.RFC3339Nano)
		case *time.Time:
			if v != nil {
				args[i] = v.Format(time.RFC3339Nano)
			}
		}
	}
	return args
}
