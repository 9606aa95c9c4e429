package inbox

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var fuzzName = regexp.MustCompile(`^file:fuzz\.sql@[0-9a-f]{8}$`)

// FuzzParseStrategyFile feeds arbitrary bytes to the strategy-file parser
// (no database). A rejected file must be a FileError that points inside
// the file; an accepted one must name itself by its hash, render every
// statement for a schema with parameters numbered $1…$n (rendering a
// checked file cannot fail), and map every
// byte of the rendered SQL back into its statement, so a server error
// position always lands on a line of the file. Seeded with
// examples/strategies/*.sql (testdata/fuzz/FuzzParseStrategyFile).
func FuzzParseStrategyFile(f *testing.F) {
	shipped, _ := filepath.Glob("../examples/strategies/*.sql")
	for _, p := range shipped {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lines := strings.Count(string(in), "\n") + 1
		s, err := ParseStrategyFile("fuzz.sql", in)
		if err != nil {
			checkFileError(t, err, lines)
			return
		}
		if !fuzzName.MatchString(s.Name()) {
			t.Fatalf("name %q", s.Name())
		}
		for _, group := range s.sqlFor(tableKey{"fuzz_schema", "account"}) {
			for _, r := range group {
				checkRendered(t, s.f, r, lines)
			}
		}
	})
}

func checkFileError(t *testing.T, err error, lines int) {
	t.Helper()
	var fe *FileError
	if !errors.As(err, &fe) || !errors.Is(err, ErrStrategyFile) {
		t.Fatalf("error %v (%T) is not a FileError", err, err)
	}
	if fe.Line < 0 || fe.Line > lines || fe.Line > 0 && fe.Col < 1 {
		t.Fatalf("error at %d:%d in a file of %d lines: %v", fe.Line, fe.Col, lines, err)
	}
	if !strings.HasPrefix(err.Error(), "strategy file fuzz.sql") {
		t.Fatalf("error does not name the file: %v", err)
	}
}

func checkRendered(t *testing.T, f *parsedFile, r *renderedStmt, lines int) {
	t.Helper()
	if len(r.srcOf) != len(r.sql) {
		t.Fatalf("@%s statement %d: %d source offsets for %d bytes of SQL", r.section, r.index, len(r.srcOf), len(r.sql))
	}
	for i, src := range r.srcOf {
		if src < 0 || src > len(r.text) {
			t.Fatalf("@%s statement %d: byte %d maps to %d, outside the statement's %d bytes", r.section, r.index, i, src, len(r.text))
		}
	}
	for _, p := range r.params {
		if r.text[p.start:p.end] != ":"+p.name {
			t.Fatalf("@%s statement %d: parameter :%s recorded at %q", r.section, r.index, p.name, r.text[p.start:p.end])
		}
	}
	for _, pos := range []int32{0, 1, int32(len(r.sql) / 2), int32(len(r.sql)), int32(len(r.sql) + 5)} {
		if line, _ := f.errorAt(r, pos); line < 1 || line > lines {
			t.Fatalf("@%s statement %d: server position %d maps to line %d of %d", r.section, r.index, pos, line, lines)
		}
	}
}
