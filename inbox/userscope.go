package inbox

import "regexp"

// What a strategy file handles. A scenario or workload that needs a
// feature a file lacks is not applicable to it (Scoped): the header
// declares what the file implements beyond the article's transaction, and
// its SQL shows whether it writes each consumer's own business table.

// FeatureIdempotencyKeys is what a file declares with the header
// "idempotency-keys: true": it handles client idempotency keys (replays
// answered DUPLICATE, a reused key with other content CONFLICT).
const FeatureIdempotencyKeys = "idempotency-keys"

// FeatureConsumerTables is writing the business table of the consumer an
// event is applied for (Options.AccountTable): a file has it when its
// effect statements name {{account}}, which is rendered per consumer. One
// that writes {{schema}}.account instead puts every consumer's effects
// into the default table.
const FeatureConsumerTables = "consumer-tables"

// Lacks implements Scoped: why the file does not handle feature, "" when
// it does.
func (s *FileStrategy) Lacks(feature string) string {
	switch feature {
	case FeatureIdempotencyKeys:
		if s.f.header.idempotencyKeys {
			return ""
		}
		return s.Name() + " does not declare it (header " + feature + ": true)"
	case FeatureConsumerTables:
		return s.f.tables
	}
	return s.Name() + " does not declare " + feature
}

// Warnings are what a file that loads should still fix, each naming the
// file, the statement and what to write instead: effect statements that
// never name {{account}}.
func (s *FileStrategy) Warnings() []string {
	if s.f.tables == "" {
		return nil
	}
	return []string{s.f.tables}
}

// schemaAccount matches what follows {{schema}} in "{{schema}}.account".
var schemaAccount = regexp.MustCompile(`^(\s*\.\s*(?:"account"|(?i:account)))(?:[^A-Za-z0-9_$]|$)`)

// consumerTables is the warning for a file whose effect statements never
// name {{account}}, "" when they do. It points at the first
// {{schema}}.account among them, else at their first statement.
// @ddl does not count: it runs once per schema, with {{account}} the
// default table.
func (f *parsedFile) consumerTables() string {
	sec := f.effectSection()
	stmts := f.sections[sec]
	for _, st := range stmts {
		if st.names(partAccount) {
			return ""
		}
	}
	for _, st := range stmts {
		for i, p := range st.parts {
			if p.kind != partSchema || i+1 == len(st.parts) || st.parts[i+1].kind != partText {
				continue
			}
			next := st.parts[i+1]
			if m := schemaAccount.FindStringSubmatchIndex(st.text[next.start:next.end]); m != nil {
				written := st.text[p.start : next.start+m[3]]
				return f.stmtErrAt(st, p.start, "%s is the default business table, whichever consumer the event is applied for: write {{account}} instead, the table of that consumer (a second consumer has another, as in bench conform's two-consumers scenario)", written).Error()
			}
		}
	}
	return f.stmtErrAt(stmts[0], 0, "no @%s statement names {{account}}, the business table of the consumer an event is applied for: write {{account}} where the SQL changes an account, or every consumer's effects land in one table (a second consumer has another, as in bench conform's two-consumers scenario)", sec).Error()
}
