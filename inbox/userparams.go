package inbox

import (
	"strconv"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox/strategyfile"
)

// Binding a strategy file's parameters (strategyfile.Params) for the
// server: each name's values, for one event, a batch or @prune.

// binder binds one parameter, in each kind of section that may use it
// (nil where it may not: strategyfile checked the file against the same
// kinds, and a test keeps the two alike).
type binder struct {
	// event binds it for one event (@apply, @claim, @effect, @external).
	event func(consumer string, ev *envelope.Event) any
	// batch binds it for a batch (@batch): an array over the events in
	// delivery order, or one value for the whole batch.
	batch func(consumer string, evs []*envelope.Event) any
	// prune binds it for @prune.
	prune func(before time.Time, limit int64) any
}

// binders bind every parameter strategyfile knows, by name.
var binders = map[string]binder{
	"consumer": {
		event: func(c string, _ *envelope.Event) any { return c },
		batch: func(c string, _ []*envelope.Event) any { return c }},
	"source":          eventBinder(func(e *envelope.Event) string { return e.Source }),
	"event_id":        eventBinder(func(e *envelope.Event) string { return e.ID }),
	"event_type":      eventBinder(func(e *envelope.Event) string { return e.Type }),
	"event_time":      eventBinder(func(e *envelope.Event) *time.Time { return nullTime(e.Time) }),
	"aggregate_id":    eventBinder(func(e *envelope.Event) string { return e.Subject }),
	"version":         eventBinder(func(e *envelope.Event) int64 { return e.AggregateVersion }),
	"amount":          eventBinder(func(e *envelope.Event) int64 { return e.Amount }),
	"kind":            eventBinder(func(e *envelope.Event) string { return e.Kind }),
	"idempotency_key": eventBinder(func(e *envelope.Event) string { return e.IdempotencyKey }),
	"tenant":          eventBinder(func(e *envelope.Event) string { return e.Tenant }),
	"operation":       eventBinder(func(e *envelope.Event) string { return e.Operation }),
	"request_hash":    eventBinder(RequestHash),
	"ordinal": {batch: func(_ string, evs []*envelope.Event) any {
		out := make([]int64, len(evs))
		for i := range out {
			out[i] = int64(i + 1)
		}
		return out
	}},
	"before": {prune: func(before time.Time, _ int64) any { return before }},
	"limit":  {prune: func(_ time.Time, limit int64) any { return limit }},
}

// eventBinder binds a parameter taken from the event: one value per
// event, an array over a batch's events in @batch.
func eventBinder[T any](of func(*envelope.Event) T) binder {
	return binder{
		event: func(_ string, ev *envelope.Event) any { return of(ev) },
		batch: func(_ string, evs []*envelope.Event) any {
			out := make([]T, len(evs))
			for i, e := range evs {
				out[i] = of(e)
			}
			return out
		}}
}

// renderedStmt is a file's statement rendered for one consumer's tables,
// with how each of its parameters is bound.
type renderedStmt struct {
	*strategyfile.Rendered
	bind []binder // in $n order
	// asText marks parameters the server typed as text (e.g. :version in
	// "CASE WHEN :version = '1'"): pgx cannot encode an int64 or a time
	// as text, so they are sent as their text form. Set by Prepare.
	asText []bool
}

// render renders st for t and looks up its binders.
func render(st *strategyfile.Stmt, t strategyfile.Target) *renderedStmt {
	r := &renderedStmt{Rendered: st.Render(t)}
	for _, p := range st.Args() {
		r.bind = append(r.bind, binders[p.Name])
	}
	return r
}

// eventArgs binds a statement's parameters for one event, in $n order.
func eventArgs(st *renderedStmt, consumer string, ev *envelope.Event) []any {
	args := make([]any, len(st.bind))
	for i, b := range st.bind {
		args[i] = b.event(consumer, ev)
	}
	return textArgs(st, args)
}

// batchArgs binds a @batch statement's parameters for a batch, in $n
// order.
func batchArgs(st *renderedStmt, consumer string, evs []*envelope.Event) []any {
	args := make([]any, len(st.bind))
	for i, b := range st.bind {
		args[i] = b.batch(consumer, evs)
	}
	return args
}

// pruneArgs binds a @prune statement's parameters, in $n order.
func pruneArgs(st *renderedStmt, before time.Time, limit int64) []any {
	args := make([]any, len(st.bind))
	for i, b := range st.bind {
		args[i] = b.prune(before, limit)
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
