package strategyfile

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

// Reading strategy files without a database: the header, every mistake a
// header can hold, and the documentation of the format. The mistakes in
// sections, statements and parameters, and what the server finds in a
// file that loads, are in package inbox's userfile_test.go.

const examplesDir = "../../examples/strategies"

// parseFile parses a file from examples/strategies.
func parseFile(t *testing.T, name string) *File {
	t.Helper()
	p := filepath.Join(examplesDir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(p, b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// aClaim is a @claim section: its SQL is the server's to judge, not the
// parser's.
const aClaim = "-- @claim\nSELECT :consumer\n"

// TestHeader: the header is read into typed settings, with the outcome
// inferred from the sections when it is not set.
func TestHeader(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Header
	}{
		{"tx.sql", Header{Outcome: OutcomeRows, Transaction: TxOne}},
		{"cte.sql", Header{Outcome: OutcomeResult, Transaction: TxOne}},
		{"batch.sql", Header{Outcome: OutcomeBatch, Transaction: TxOne}},
		{"idempotency.sql", Header{Outcome: OutcomeResult, Transaction: TxOne, IdempotencyKeys: true}},
		{"broken-split.sql", Header{Outcome: OutcomeRows, Transaction: TxSplit, Broken: true}},
	} {
		h := parseFile(t, tc.file).Header
		if h.Description == "" {
			t.Errorf("%s: no description", tc.file)
		}
		h.Description, h.at = "", nil
		if !reflect.DeepEqual(h, tc.want) {
			t.Errorf("%s: header %+v, want %+v", tc.file, h, tc.want)
		}
	}
	for content, want := range map[string]string{
		"-- @apply\nSELECT 'APPLIED' AS result\n":               OutcomeResult,
		aClaim + "-- @effect\nSELECT 1\n":                       OutcomeRows,
		"-- @batch\nSELECT 1 AS ordinal, 'APPLIED' AS result\n": OutcomeBatch,
	} {
		f, err := Parse("inferred.sql", []byte(content))
		if err != nil || f.Header.Outcome != want {
			t.Errorf("%q: %v, %v; want outcome %s", content, f, err, want)
		}
	}
}

// TestHeaderErrors: a bad value, a setting given twice and settings that
// contradict each other name the header line and what is accepted.
func TestHeaderErrors(t *testing.T) {
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
		{"tx.sql", "-- transaction: two\n" + aClaim + "-- @effect\nSELECT 1\n",
			[]string{"tx.sql:1:1", `header transaction: "two"`, "want one or split"}},
		{"twice.sql", "-- outcome: result\n\n-- outcome: rows\n-- @apply\nSELECT 'APPLIED' AS result\n",
			[]string{"twice.sql:3:1", `header setting "outcome" appears twice (first at line 1)`}},
		{"split-result.sql", "-- broken: true\n-- transaction: split\n-- @apply\nSELECT 'APPLIED' AS result\n",
			[]string{"split-result.sql:2:1", "header transaction: split needs outcome: rows"}},
		{"split-correct.sql", "-- outcome: rows\n-- transaction: split\n" + aClaim + "-- @effect\nSELECT 1\n",
			[]string{"split-correct.sql:2:1", "header transaction: split", "negative control (broken: true)"}},
	} {
		_, err := Parse(tc.name, []byte(tc.content))
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: %v, want a strategy file error", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
	}
}

// TestDocsMatchTables: examples/strategies/README.md lists the header
// settings and the parameters the code knows, no more, no fewer.
func TestDocsMatchTables(t *testing.T) {
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
	for _, p := range params {
		known = append(known, p.Name)
	}
	slices.Sort(documented)
	slices.Sort(known)
	if !slices.Equal(documented, known) {
		t.Errorf("README.md's parameter table lists %v, the code %v", documented, known)
	}
}
