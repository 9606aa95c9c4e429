package strategyfile

import (
	"slices"
	"strings"
)

// Param is one named parameter of strategy files: what it carries, and in
// which kinds of section a file may use it. Values are bound with their Go
// types (text, bigint, timestamptz), by the strategy that runs the file;
// a file casts where PostgreSQL cannot infer a type.
type Param struct {
	Name string
	Doc  string
	// ForEvent: one value per event (@apply, @claim, @effect, @external).
	ForEvent bool
	// ForBatch: in @batch, an array over the batch's events in delivery
	// order, or one value for the whole batch.
	ForBatch bool
	// ForPrune: in @prune.
	ForPrune bool
}

// params are every parameter a strategy file may use: the one table that
// checking a file and the messages about unknown parameters read.
// examples/strategies/README.md documents the same names (a test keeps
// the two alike), and package inbox binds each (a test there keeps its
// binders alike).
var params = []*Param{
	{Name: "consumer", Doc: "the consumer name (text): the processing responsibility, first part of the inbox key", ForEvent: true, ForBatch: true},
	eventParam("source", "the event's CloudEvents source (text)"),
	eventParam("event_id", "the event's CloudEvents id (text); (source, event_id) is the identity"),
	eventParam("event_type", "the event's CloudEvents type (text)"),
	eventParam("event_time", "the event's occurrence time (timestamptz, NULL when absent)"),
	eventParam("aggregate_id", "the aggregate (account) id, the CloudEvents subject (text)"),
	eventParam("version", "the aggregate version the event carries (bigint)"),
	eventParam("amount", "the increment, or the full balance of a snapshot (bigint)"),
	eventParam("kind", "'increment' or 'snapshot' (text)"),
	eventParam("idempotency_key", "the client idempotency key, '' when absent (text)"),
	eventParam("tenant", "the idempotency key's tenant, '' when absent (text)"),
	eventParam("operation", "the idempotency key's operation, '' when absent (text)"),
	eventParam("request_hash", "hex SHA-256 of the request content (tenant, operation, subject, kind, amount) for idempotency conflicts (text)"),
	{Name: "ordinal", Doc: "the events' positions in the batch, 1..n (int[]); the last statement returns one row per ordinal", ForBatch: true},
	{Name: "before", Doc: "delete inbox rows applied before this time (timestamptz)", ForPrune: true},
	{Name: "limit", Doc: "delete at most this many rows per statement (bigint)", ForPrune: true},
}

// eventParam is a parameter taken from the event: one value per event,
// an array over a batch's events in @batch.
func eventParam(name, doc string) *Param {
	return &Param{Name: name, Doc: doc, ForEvent: true, ForBatch: true}
}

// Params lists every parameter a strategy file may use.
func Params() []Param {
	out := make([]Param, len(params))
	for i, p := range params {
		out[i] = *p
	}
	return out
}

// allowedIn reports whether the parameter may be used in section s.
func (p *Param) allowedIn(s Section) bool {
	switch s {
	case Apply, Claim, Effect, External:
		return p.ForEvent
	case Batch:
		return p.ForBatch
	case Prune:
		return p.ForPrune
	}
	return false // @ddl runs once per schema, before any event
}

// sectionsOf lists where p may be used, for messages.
func (p *Param) sectionsOf() []string {
	var out []string
	for s := range NumSections {
		if p.allowedIn(s) {
			out = append(out, "@"+s.String())
		}
	}
	return out
}

// paramList lists the parameters section s may use: ":a, :b, …".
func paramList(s Section) string {
	var names []string
	for _, p := range params {
		if p.allowedIn(s) {
			names = append(names, ":"+p.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// checkParams checks every parameter against its section and records how
// each statement's parameters are bound, in $n order.
func (f *File) checkParams() error {
	for s, stmts := range f.sections {
		for _, st := range stmts {
			for _, ref := range st.params {
				i := slices.IndexFunc(params, func(p *Param) bool { return p.Name == ref.name })
				if i >= 0 && params[i].allowedIn(Section(s)) {
					if !slices.Contains(st.args, params[i]) {
						st.args = append(st.args, params[i])
					}
					continue
				}
				e := f.stmtErrAt(st, ref.start, "")
				e.Param = ref.name
				switch {
				case Section(s) == DDL:
					e.Msg = "@ddl takes no parameters (it runs once, before any event)"
				case i >= 0:
					p := params[i]
					e.Msg = "not a parameter of @" + Section(s).String() + ", only of " + orList(p.sectionsOf(), "and") + " (" + p.Doc + "): known here are " + paramList(Section(s))
				default:
					e.Msg = "unknown parameter: known are " + paramList(Section(s))
				}
				return e
			}
		}
	}
	return nil
}

// num is the $n of the parameter named name in st.
func (st *Stmt) num(name string) int {
	return 1 + slices.IndexFunc(st.args, func(p *Param) bool { return p.Name == name })
}
