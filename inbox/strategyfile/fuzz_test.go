package strategyfile

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var fuzzHash = regexp.MustCompile(`^[0-9a-f]{8}$`)

// FuzzParse feeds arbitrary bytes to the strategy-file parser. A rejected
// file must be an Error that points inside the file; an accepted one must
// carry its hash, render every statement for a schema with parameters
// numbered $1…$n (rendering a checked file cannot fail), and map every
// byte of the rendered SQL back into its statement, so a server error
// position always lands on a line of the file. Seeded with
// examples/strategies/*.sql (testdata/fuzz/FuzzParse).
func FuzzParse(f *testing.F) {
	shipped, _ := filepath.Glob("../../examples/strategies/*.sql")
	for _, p := range shipped {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lines := strings.Count(string(in), "\n") + 1
		file, err := Parse("fuzz.sql", in)
		if err != nil {
			checkError(t, err, lines)
			return
		}
		if file.Base != "fuzz.sql" || !fuzzHash.MatchString(file.Hash) {
			t.Fatalf("base %q, hash %q", file.Base, file.Hash)
		}
		for s := range NumSections {
			for _, st := range file.Statements(s) {
				checkRendered(t, file, st.Render(Target{`"fuzz_schema"`, `"fuzz_schema"."account"`}), lines)
			}
		}
	})
}

func checkError(t *testing.T, err error, lines int) {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v (%T) is not an Error", err, err)
	}
	if fe.Line < 0 || fe.Line > lines || fe.Line > 0 && fe.Col < 1 {
		t.Fatalf("error at %d:%d in a file of %d lines: %v", fe.Line, fe.Col, lines, err)
	}
	if !strings.HasPrefix(err.Error(), "strategy file fuzz.sql") {
		t.Fatalf("error does not name the file: %v", err)
	}
}

func checkRendered(t *testing.T, f *File, r *Rendered, lines int) {
	t.Helper()
	if len(r.srcOf) != len(r.SQL) {
		t.Fatalf("@%s statement %d: %d source offsets for %d bytes of SQL", r.Section, r.Index, len(r.srcOf), len(r.SQL))
	}
	for i, src := range r.srcOf {
		if src < 0 || src > len(r.Text) {
			t.Fatalf("@%s statement %d: byte %d maps to %d, outside the statement's %d bytes", r.Section, r.Index, i, src, len(r.Text))
		}
	}
	for _, p := range r.params {
		if r.Text[p.start:p.end] != ":"+p.name {
			t.Fatalf("@%s statement %d: parameter :%s recorded at %q", r.Section, r.Index, p.name, r.Text[p.start:p.end])
		}
	}
	for _, pos := range []int32{0, 1, int32(len(r.SQL) / 2), int32(len(r.SQL)), int32(len(r.SQL) + 5)} {
		if line, _ := f.Position(r, pos); line < 1 || line > lines {
			t.Fatalf("@%s statement %d: server position %d maps to line %d of %d", r.Section, r.Index, pos, line, lines)
		}
	}
}
