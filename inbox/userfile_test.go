package inbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/inbox/strategyfile"
)

// Loading strategy files: names, every mistake a user can make, and what
// the server finds in a file that loads. The parser's own tests (headers,
// the format's documentation) are in package strategyfile; the examples'
// runs are in userstrategy_test.go.

func TestStrategyFileNameAndHeader(t *testing.T) {
	s, err := LoadStrategyFile(filepath.Join(examplesDir, "cte.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Name(), "file:cte.sql@") || len(s.Name()) != len("file:cte.sql@")+8 {
		t.Fatalf("name %q, want file:cte.sql@<8 hex digits>", s.Name())
	}
	if s.Broken() || s.Outcome() != strategyfile.OutcomeResult || Label(s) != s.Name() {
		t.Fatalf("cte.sql: broken %t, outcome %s, label %q", s.Broken(), s.Outcome(), Label(s))
	}
	b, err := LoadStrategyFile(filepath.Join(examplesDir, "broken-split.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if !b.Broken() || !strings.Contains(Label(b), "negative control") {
		t.Fatalf("broken-split.sql: broken %t, label %q", b.Broken(), Label(b))
	}
	// The hash follows the content, not the path.
	content, _ := os.ReadFile(filepath.Join(examplesDir, "cte.sql"))
	same, err := ParseStrategyFile("elsewhere/cte.sql", content)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := ParseStrategyFile("cte.sql", append(content, []byte("\n-- a comment changes the hash\n")...))
	if err != nil {
		t.Fatal(err)
	}
	if same.Name() != s.Name() || changed.Name() == s.Name() {
		t.Fatalf("names %q, %q, %q: the hash must follow the content", s.Name(), same.Name(), changed.Name())
	}
}

// badFile writes content as NAME in a temp dir and returns its path.
func badFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodClaim = `-- @claim
INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version) ON CONFLICT DO NOTHING
`

// TestStrategyFileBadInput: every mistake is a strategyfile.ErrInvalid naming the
// file, the section and statement, the line:col, and the parameter.
func TestStrategyFileBadInput(t *testing.T) {
	in := newInbox(t, parkingOff)
	for _, tc := range []struct {
		name, content string
		atLoad        bool // found without the database
		want          []string
	}{
		{"unknown-param.sql", "-- outcome: result\n-- @apply\nSELECT 'APPLIED' AS result\nWHERE :evnt_id IS NOT NULL\n", true,
			[]string{"unknown-param.sql:4:7", "@apply statement 1", "parameter :evnt_id", "unknown parameter", ":event_id"}},
		{"misplaced-param.sql", "-- @apply\nSELECT 'APPLIED' AS result WHERE :ordinal > 0\n", true,
			[]string{"misplaced-param.sql:2:34", "parameter :ordinal", "not a parameter of @apply, only of @batch (the events' positions", "known here are", ":event_id"}},
		{"param-in-ddl.sql", "-- @ddl\nCREATE TABLE {{schema}}.x (a int);\nCREATE INDEX ON {{schema}}.x (a) WHERE a > :version;\n-- @apply\nSELECT 'APPLIED' AS result\n", true,
			[]string{"param-in-ddl.sql:3:", "@ddl statement 2", "parameter :version", "no parameters"}},
		{"positional.sql", "-- @apply\nSELECT 'APPLIED' AS result WHERE $1 = 'x'\n", true,
			[]string{"positional.sql:2:34", "@apply statement 1", "positional parameter $1"}},
		{"typo-header.sql", "-- outcom: rows\n-- @apply\nSELECT 'APPLIED' AS result\n", true,
			[]string{"typo-header.sql:1:1", `unknown header setting "outcom"`}},
		{"unknown-section.sql", "-- @applly\nSELECT 1\n", true, []string{"unknown-section.sql:1:1", "unknown section @applly"}},
		{"split-correct.sql", "-- transaction: split\n" + goodClaim + "-- @effect\nSELECT 1\n", true,
			[]string{"split-correct.sql", "negative control"}},
		{"placeholder.sql", "-- @apply\nSELECT 'APPLIED' AS result FROM {{schema}}.inbox, {{shema}}.account\n", true,
			[]string{"placeholder.sql:2:", "unknown placeholder {{shema}}"}},
		{"no-result.sql", "-- @apply\nSELECT 'APPLIED' AS outcome, 1 AS n\n", false,
			[]string{"no-result.sql:2:1", "@apply statement 1", "missing result column", "outcome, n"}},
		{"ddl-syntax.sql", "-- @ddl\nCREATE INDEX ON {{schema}}.inbox (aggregate_id);\nALTER TABLE {{schema}}.inbox ADD COLUMNN note text;\n-- @apply\nSELECT 'APPLIED' AS result\n", false,
			[]string{"ddl-syntax.sql:3:", "@ddl statement 2", "syntax error", "42601"}},
		{"stmt-syntax.sql", "-- @apply\nWITH ins AS (\n  INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)\n  VALUES (:consumer, :source, :event_id, :aggregate_id, :version) ON CONFLICT DO NOTHIN\n  RETURNING 1)\nSELECT 'APPLIED' AS result\n", false,
			[]string{"stmt-syntax.sql:4:", "@apply statement 1", "syntax error", "42601"}},
		{"stmt-column.sql", goodClaim + "-- @effect\nUPDATE {{schema}}.account SET balance = balance + :amount WHERE id = :aggregate_id AND versoin = :version - 1\n", false,
			[]string{"stmt-column.sql:5:88", "@effect statement 1", "versoin", "42703"}},
		{"external-no-header.sql", goodClaim + "-- @effect\nSELECT 1\n-- @external\nSELECT '' AS request_key, 1 AS amount\n", true,
			[]string{"external-no-header.sql", "@external", "external: before-commit"}},
		{"external-no-section.sql", "-- external: before-commit\n" + goodClaim + "-- @effect\nSELECT 1\n", true,
			[]string{"external-no-section.sql", "exactly one @external statement"}},
		{"external-result.sql", "-- external: before-commit\n-- @apply\nSELECT 'APPLIED' AS result\n-- @external\nSELECT '' AS request_key, 1 AS amount\n", true,
			[]string{"external-result.sql:1:1", "header external", "outcome: rows"}},
		{"external-columns.sql", "-- external: before-commit\n" + goodClaim + "-- @effect\nUPDATE {{account}} SET balance = balance + :amount WHERE id = :aggregate_id AND version = :version - 1\n-- @external\nSELECT :event_id AS key\n", false,
			[]string{"external-columns.sql:8:1", "@external statement 1", "missing request_key column", "columns key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := badFile(t, tc.name, tc.content)
			s, err := LoadStrategyFile(path)
			if err == nil {
				if tc.atLoad {
					t.Fatalf("loaded; want an error found at load")
				}
				err = s.Prepare(ctxT(t), in.Pool(), in.Schema())
			} else if !tc.atLoad {
				t.Fatalf("load: %v; want it to load and fail against the server", err)
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, strategyfile.ErrInvalid) {
				t.Errorf("error %v does not match strategyfile.ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			t.Log(err)
		})
	}
}

// TestStrategyFileValidate: the scratch-schema check catches a server-side
// error and leaves no schema behind.
func TestStrategyFileValidate(t *testing.T) {
	in := newInbox(t, nil)
	bad, err := LoadStrategyFile(badFile(t, "bad.sql", "-- @apply\nSELECT 'APPLIED' AS result FROM {{schema}}.nope\n"))
	if err != nil {
		t.Fatal(err)
	}
	scratch := in.Schema() + "_chk"
	if err := bad.Validate(ctxT(t), in.Pool(), scratch); !errors.Is(err, strategyfile.ErrInvalid) || !strings.Contains(err.Error(), "bad.sql:2:") {
		t.Fatalf("validate: %v", err)
	}
	var n int
	if err := in.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", scratch).Scan(&n); err != nil || n != 0 {
		t.Fatalf("scratch schema left behind: %d, %v", n, err)
	}
	good, err := LoadStrategyFile(filepath.Join(examplesDir, "broken-split.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Validate(ctxT(t), in.Pool(), scratch); err != nil {
		t.Fatal(err)
	}
}

// TestStrategyFileTextTypedParams: a number or time the server types as
// text (no cast in the SQL) is still bound.
func TestStrategyFileTextTypedParams(t *testing.T) {
	in := newInbox(t, parkingOff)
	s, err := ParseStrategyFile("text.sql", []byte("-- @apply\nSELECT CASE WHEN :version = '1' AND :amount = '5' AND :event_time <> '' THEN 'STALE' ELSE 'GAP' END AS result\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctxT(t), in.Pool(), in.Schema()); err != nil {
		t.Fatal(err)
	}
	expect(t, apply(t, in, s, consumer, ev("x", "acc-x", 1, 5)), Stale)
}

// TestBindersMatchParams: every parameter strategyfile accepts is bound
// for each kind of section it accepts it in, and no other; the header
// setting a file declares idempotency keys with is FeatureIdempotencyKeys.
func TestBindersMatchParams(t *testing.T) {
	params := strategyfile.Params()
	for _, p := range params {
		b, ok := binders[p.Name]
		if !ok || (b.event != nil) != p.ForEvent || (b.batch != nil) != p.ForBatch || (b.prune != nil) != p.ForPrune {
			t.Errorf("parameter :%s (event %t, batch %t, prune %t): binder %t %+v", p.Name, p.ForEvent, p.ForBatch, p.ForPrune, ok, b)
		}
	}
	if len(binders) != len(params) {
		t.Errorf("%d binders for %d parameters", len(binders), len(params))
	}
	s, err := ParseStrategyFile("keys.sql", []byte("-- "+FeatureIdempotencyKeys+": true\n-- @apply\nSELECT 'APPLIED' AS result\n"))
	if err != nil || !Handles(s, FeatureIdempotencyKeys) {
		t.Errorf("a file declaring %s: %v, lacks %q", FeatureIdempotencyKeys, err, Lacks(s, FeatureIdempotencyKeys))
	}
}

// TestStrategyFileConsumerTables: a file whose effect statements never
// name {{account}} writes every consumer's effects into one table. It
// loads with a warning naming the file, the statement and what to write
// instead, and lacks FeatureConsumerTables for that reason (bench conform
// makes two-consumers N/A for it); the example files name {{account}}.
func TestStrategyFileConsumerTables(t *testing.T) {
	path := filepath.Join("testdata", "strategies", "schema-account.sql")
	s, err := LoadStrategyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w := s.Warnings()
	if len(w) != 1 {
		t.Fatalf("warnings %q, want one", w)
	}
	for _, want := range []string{"strategy file " + path + ":25:13: @effect statement 1: ", "{{schema}}.account is the default business table", "write {{account}} instead", "two-consumers"} {
		if !strings.Contains(w[0], want) {
			t.Errorf("warning %q does not say %q", w[0], want)
		}
	}
	if Handles(s, FeatureConsumerTables) || Lacks(s, FeatureConsumerTables) != w[0] {
		t.Errorf("the file lacks consumer tables for the warning's reason: %q", Lacks(s, FeatureConsumerTables))
	}
	t.Log(w[0])

	// Nothing to point at but the effect statements: the first one. A
	// {{account}} in @ddl does not count: it is always the default table.
	for _, tc := range []struct{ content, want string }{
		{"-- @ddl\nCREATE FUNCTION {{schema}}.f(c text) RETURNS text LANGUAGE sql AS $$ UPDATE {{account}} SET balance = 0 RETURNING 'APPLIED' $$\n-- @apply\nSELECT {{schema}}.f(:consumer) AS result\n",
			"fn.sql:4:1: @apply statement 1: no @apply statement names {{account}}"},
		{"-- @batch\nSELECT 1 AS ordinal, 'APPLIED' AS result;\nUPDATE {{schema}}.\"account\" SET balance = 0 WHERE id = ANY (:aggregate_id)\n",
			"fn.sql:3:8: @batch statement 2: {{schema}}.\"account\" is the default business table"},
	} {
		s, err := ParseStrategyFile("fn.sql", []byte(tc.content))
		if err != nil {
			t.Fatal(err)
		}
		if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], tc.want) {
			t.Errorf("warnings %q, want one saying %q", w, tc.want)
		}
	}

	files, _ := filepath.Glob(filepath.Join(examplesDir, "*.sql"))
	for _, p := range files {
		s, err := LoadStrategyFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if w := s.Warnings(); len(w) > 0 || !Handles(s, FeatureConsumerTables) {
			t.Errorf("%s: warnings %q", p, w)
		}
	}
	if len(files) < 5 {
		t.Fatalf("examples %v", files)
	}
}
