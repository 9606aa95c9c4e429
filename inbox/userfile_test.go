package inbox

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Reading strategy files: names, headers, every mistake a user can make,
// and what the server finds in a file that loads (userfile.go and the
// files beside it). The examples' runs are in userstrategy_test.go.

func TestStrategyFileNameAndHeader(t *testing.T) {
	s, err := LoadStrategyFile(filepath.Join(examplesDir, "cte.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Name(), "file:cte.sql@") || len(s.Name()) != len("file:cte.sql@")+8 {
		t.Fatalf("name %q, want file:cte.sql@<8 hex digits>", s.Name())
	}
	if s.Broken() || s.Outcome() != OutcomeResult || Label(s) != s.Name() {
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

// TestStrategyFileBadInput: every mistake is an ErrStrategyFile naming the
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
			if !errors.Is(err, ErrStrategyFile) {
				t.Errorf("error %v does not match ErrStrategyFile", err)
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
	if err := bad.Validate(ctxT(t), in.Pool(), scratch); !errors.Is(err, ErrStrategyFile) || !strings.Contains(err.Error(), "bad.sql:2:") {
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

// TestStrategyFileHeader: the header is read into typed settings, with
// the outcome inferred from the sections when it is not set.
func TestStrategyFileHeader(t *testing.T) {
	for _, tc := range []struct {
		file string
		want fileHeader
	}{
		{"tx.sql", fileHeader{outcome: OutcomeRows, transaction: TxOne}},
		{"cte.sql", fileHeader{outcome: OutcomeResult, transaction: TxOne}},
		{"batch.sql", fileHeader{outcome: OutcomeBatch, transaction: TxOne}},
		{"idempotency.sql", fileHeader{outcome: OutcomeResult, transaction: TxOne, idempotencyKeys: true}},
		{"broken-split.sql", fileHeader{outcome: OutcomeRows, transaction: TxSplit, broken: true}},
	} {
		s, err := LoadStrategyFile(filepath.Join(examplesDir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		h := s.f.header
		if h.description == "" {
			t.Errorf("%s: no description", tc.file)
		}
		h.description, h.at = "", nil
		if !reflect.DeepEqual(h, tc.want) {
			t.Errorf("%s: header %+v, want %+v", tc.file, h, tc.want)
		}
	}
	for content, want := range map[string]string{
		"-- @apply\nSELECT 'APPLIED' AS result\n":               OutcomeResult,
		goodClaim + "-- @effect\nSELECT 1\n":                    OutcomeRows,
		"-- @batch\nSELECT 1 AS ordinal, 'APPLIED' AS result\n": OutcomeBatch,
	} {
		s, err := ParseStrategyFile("inferred.sql", []byte(content))
		if err != nil || s.Outcome() != want {
			t.Errorf("%q: outcome %v, %v; want %s", content, s, err, want)
		}
	}
}

// TestStrategyFileHeaderErrors: a bad value, a setting given twice and
// settings that contradict each other name the header line and what is
// accepted.
func TestStrategyFileHeaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"outcome.sql", "-- description: a file\n-- outcome: row\n-- @apply\nSELECT 'APPLIED' AS result\n",
			[]string{"outcome.sql:2:1", `header outcome: "row"`, "want result, rows or batch"}},
		{"bool.sql", "-- broken: yes\n-- @apply\nSELECT 'APPLIED' AS result\n",
			[]string{"bool.sql:1:1", `header broken: "yes"`, "want true or false"}},
		{"keys.sql", "-- idempotency-keys: 1\n-- @apply\nSELECT 'APPLIED' AS result\n",
			[]string{"keys.sql:1:1", `header idempotency-keys: "1"`, "want true or false"}},
		{"tx.sql", "-- transaction: two\n" + goodClaim + "-- @effect\nSELECT 1\n",
			[]string{"tx.sql:1:1", `header transaction: "two"`, "want one or split"}},
		{"twice.sql", "-- outcome: result\n\n-- outcome: rows\n-- @apply\nSELECT 'APPLIED' AS result\n",
			[]string{"twice.sql:3:1", `header setting "outcome" appears twice (first at line 1)`}},
		{"split-result.sql", "-- broken: true\n-- transaction: split\n-- @apply\nSELECT 'APPLIED' AS result\n",
			[]string{"split-result.sql:2:1", "header transaction: split needs outcome: rows"}},
		{"split-correct.sql", "-- outcome: rows\n-- transaction: split\n" + goodClaim + "-- @effect\nSELECT 1\n",
			[]string{"split-correct.sql:2:1", "header transaction: split", "negative control (broken: true)"}},
	} {
		_, err := ParseStrategyFile(tc.name, []byte(tc.content))
		if !errors.Is(err, ErrStrategyFile) {
			t.Fatalf("%s: %v, want a strategy file error", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
	}
}

// TestStrategyFileDocsMatchTables: examples/strategies/README.md lists
// the header settings and the parameters the code knows, no more, no
// fewer.
func TestStrategyFileDocsMatchTables(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(examplesDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	keys := regexp.MustCompile(`Keys are\s+([^;]*);`).FindStringSubmatch(doc)
	if keys == nil {
		t.Fatal("README.md no longer says \"Keys are …;\"")
	}
	var documented, known []string
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(keys[1], -1) {
		documented = append(documented, m[1])
	}
	for _, s := range headerSettings {
		known = append(known, s.key)
	}
	if !slices.Equal(documented, known) {
		t.Errorf("README.md lists the header settings %v, the code %v", documented, known)
	}
	documented, known = nil, nil
	for _, line := range strings.Split(doc, "\n") {
		if cell, ok := strings.CutPrefix(line, "| `:"); ok {
			cell = "`:" + cell[:strings.Index(cell, "|")]
			for _, m := range regexp.MustCompile("`:([a-z_]+)`").FindAllStringSubmatch(cell, -1) {
				documented = append(documented, m[1])
			}
		}
	}
	for _, p := range fileParams {
		known = append(known, p.name)
	}
	slices.Sort(documented)
	slices.Sort(known)
	if !slices.Equal(documented, known) {
		t.Errorf("README.md's parameter table lists %v, the code %v", documented, known)
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
