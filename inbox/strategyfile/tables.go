package strategyfile

import "regexp"

// schemaAccount matches what follows {{schema}} in "{{schema}}.account".
var schemaAccount = regexp.MustCompile(`^(\s*\.\s*(?:"account"|(?i:account)))(?:[^A-Za-z0-9_$]|$)`)

// ConsumerTables is why the file does not write the business table of the
// consumer an event is applied for, "" when it does: its effect statements
// must name {{account}}, which is rendered per consumer. One that writes
// {{schema}}.account instead puts every consumer's effects into the
// default table. The sentence names the file, the statement and what to
// write instead; the file loads with it as a warning.
func (f *File) ConsumerTables() string { return f.tables }

// consumerTables is the warning for a file whose effect statements never
// name {{account}}, "" when they do. It points at the first
// {{schema}}.account among them, else at their first statement.
// @ddl does not count: it runs once per schema, with {{account}} the
// default table.
func (f *File) consumerTables() string {
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
			if m := schemaAccount.FindStringSubmatchIndex(st.Text[next.start:next.end]); m != nil {
				written := st.Text[p.start : next.start+m[3]]
				return f.stmtErrAt(st, p.start, "%s is the default business table, whichever consumer the event is applied for: write {{account}} instead, the table of that consumer (a second consumer has another, as in bench conform's two-consumers scenario)", written).Error()
			}
		}
	}
	return f.stmtErrAt(stmts[0], 0, "no @%s statement names {{account}}, the business table of the consumer an event is applied for: write {{account}} where the SQL changes an account, or every consumer's effects land in one table (a second consumer has another, as in bench conform's two-consumers scenario)", sec).Error()
}
