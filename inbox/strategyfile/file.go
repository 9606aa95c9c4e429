// Package strategyfile reads strategy files: a team's own inbox SQL with
// named parameters, in the format examples/strategies/README.md
// documents. Parse checks everything that needs no database — the header
// (header.go), the sections, the statements (lex.go), every parameter
// (params.go) and placeholder (render.go) — and every error it returns
// is an Error pointing at file:line:col, the section, the statement and
// the parameter. The File it yields is checked once: rendering its
// statements for a schema and a business table cannot fail.
//
// Running a file, and checking its SQL against the server, is package
// inbox's (FileStrategy): it binds the parameters, and maps a server
// error's position back into the file with File.Position.
package strategyfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// ErrInvalid marks a problem in a user strategy file (format, unknown
// parameter, SQL the server rejects): the user fixes the file. The CLI
// exits 2 on it. Failures to reach the database do not match it.
var ErrInvalid = errors.New("bad strategy file")

// Error is an error in a strategy file. Every field that is known is
// named in the message, so a user can go straight to the line.
type Error struct {
	Path      string
	Line, Col int    // 0 when the error is about the whole file
	Section   string // "ddl", "apply", "claim", "effect", "batch", "prune", "external"; "" for the header
	Index     int    // 1-based statement number within Section; 0 for the section
	Param     string // the parameter, without its colon
	Msg       string
	Err       error // the server's error, if any
}

// Error names the file, the position, the section and statement, the
// parameter and what is wrong, in that order, each where known.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("strategy file ")
	b.WriteString(e.Path)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
	}
	b.WriteString(": ")
	if e.Section != "" {
		b.WriteString("@" + e.Section)
		if e.Index > 0 {
			fmt.Fprintf(&b, " statement %d", e.Index)
		}
		b.WriteString(": ")
	}
	if e.Param != "" {
		fmt.Fprintf(&b, "parameter :%s: ", e.Param)
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		if e.Msg != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap is the server's error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is matches ErrInvalid: every Error is the file's to fix.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Outcome modes of a strategy file.
const (
	// OutcomeResult: the (last) @apply statement returns a text column
	// named result holding a result name.
	OutcomeResult = "result"
	// OutcomeRows: the article's rule on affected rows: @claim (0 rows →
	// DUPLICATE), then @effect (1 row → APPLIED; 0 → the version decides
	// STALE or GAP).
	OutcomeRows = "rows"
	// OutcomeBatch: the @batch statements apply a whole batch in one
	// transaction, with every parameter an array over the batch's events;
	// the last returns one row per event: its ordinal and its result.
	OutcomeBatch = "batch"
)

// Transaction modes of an OutcomeRows file.
const (
	// TxOne runs claim and effect in one transaction: the correct way.
	TxOne = "one"
	// TxSplit commits the claim on its own before the effect's
	// transaction: the article's split-commit bug, for negative controls.
	TxSplit = "split"
)

// Section is a section of a strategy file.
type Section int

// The sections, in the order they are checked and prepared.
const (
	DDL Section = iota
	Apply
	Claim
	Effect
	Batch
	Prune
	External
	// NumSections counts the sections.
	NumSections
)

// sectionNames are the sections' names (the "-- @name" markers).
var sectionNames = [NumSections]string{"ddl", "apply", "claim", "effect", "batch", "prune", "external"}

// String is the section's name, as its marker writes it after the "@".
func (s Section) String() string { return sectionNames[s] }

// markers lists the sections as a user writes them: "@ddl, … and @prune".
func markers() string {
	m := make([]string, NumSections)
	for i, n := range sectionNames {
		m[i] = "@" + n
	}
	return orList(m, "and")
}

// orList joins items as "a, b or c" (with "and": "a, b and c").
func orList(items []string, word string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + word + " " + items[len(items)-1]
}

// Stmt is one statement of a section, checked: its parameters are known
// for its section and numbered, its placeholders resolved.
type Stmt struct {
	Section Section
	Index   int    // 1-based within the section
	Text    string // source text, trimmed
	Off     int    // byte offset of Text in the file
	params  []paramRef
	// args are the parameters in $n order.
	args []*Param
	// parts are text, placeholders and parameters in order: what Render
	// joins for a schema and table.
	parts []stmtPart
}

// Args are the statement's parameters in $n order: what binding it
// passes.
func (st *Stmt) Args() []*Param { return st.args }

// paramRef is one :name in a statement (offsets relative to text).
type paramRef struct {
	start, end int // the span of ":name"
	name       string
}

// File is a strategy file after every check that needs no database: the
// value a strategy runs.
type File struct {
	Path   string // as given to Parse: it names the file in every error
	Base   string // the file's name, without its directory
	Hash   string // the first 8 hex digits of the SHA-256 of the content
	Header Header

	content  string
	sections [NumSections][]*Stmt
	marked   [NumSections]bool // sections with a marker, even an empty one
	// tables is the warning for a file whose effect statements never name
	// {{account}} (tables.go); "" when they do.
	tables string
}

var sectionLine = regexp.MustCompile(`^--\s*@([A-Za-z_]+)\s*$`)

// Parse checks a file's format and parameters without a database; path
// names the file in errors. Every error is an *Error.
func Parse(path string, content []byte) (*File, error) {
	sum := sha256.Sum256(content)
	f := &File{Path: path, Base: filepath.Base(path), Hash: hex.EncodeToString(sum[:])[:8], content: string(content)}
	if !utf8.Valid(content) {
		return nil, &Error{Path: path, Msg: "not UTF-8 text"}
	}
	if strings.ContainsAny(f.Base, ", *") {
		return nil, &Error{Path: path, Msg: "the file name must not contain commas, spaces or '*' (it names the strategy)"}
	}
	spans, err := f.splitSections()
	if err != nil {
		return nil, err
	}
	for _, s := range spans {
		stmts, err := f.splitStatements(s.id, s.start, s.end)
		if err != nil {
			return nil, err
		}
		f.sections[s.id], f.marked[s.id] = stmts, true
	}
	if err := f.checkShape(); err != nil {
		return nil, err
	}
	for _, stmts := range f.sections {
		for _, st := range stmts {
			if err := f.resolve(st); err != nil {
				return nil, err
			}
		}
	}
	f.tables = f.consumerTables()
	return f, nil
}

// Statements are the statements of section s, in file order.
func (f *File) Statements(s Section) []*Stmt { return f.sections[s] }

// sectionSpan is one section's body: content[start:end].
type sectionSpan struct {
	id         Section
	start, end int
	markerOff  int
}

// splitSections reads the lines before the first section marker as the
// header ("-- key: value" settings among free comments) and returns the
// sections: a marker "-- @name" opens one that runs to the next marker.
func (f *File) splitSections() ([]sectionSpan, error) {
	var spans []sectionSpan
	hp := newHeaderParser(f)
	off := 0
	for _, line := range strings.SplitAfter(f.content, "\n") {
		lineOff := off
		off += len(line)
		t := strings.TrimSpace(line)
		if m := sectionLine.FindStringSubmatch(t); m != nil {
			id := Section(slices.Index(sectionNames[:], m[1]))
			if id < 0 {
				return nil, f.errAt(lineOff, "unknown section @%s: sections are %s", m[1], markers())
			}
			for _, s := range spans {
				if s.id == id {
					return nil, f.errAt(lineOff, "section @%s appears twice (first at line %d)", id, f.Line(s.markerOff))
				}
			}
			if n := len(spans); n > 0 {
				spans[n-1].end = lineOff
			}
			spans = append(spans, sectionSpan{id: id, start: off, end: len(f.content), markerOff: lineOff})
			continue
		}
		if len(spans) > 0 {
			continue
		}
		if t != "" && !strings.HasPrefix(t, "--") {
			m := make([]string, NumSections)
			for i, n := range sectionNames {
				m[i] = "'-- @" + n + "'"
			}
			return nil, f.errAt(lineOff, "SQL before the first section marker: start each part with a line %s", orList(m, "or"))
		}
		if err := hp.line(t, lineOff); err != nil {
			return nil, err
		}
	}
	f.Header = hp.h
	return spans, nil
}

// errAt is an Error at byte offset off of the file.
func (f *File) errAt(off int, msg string, a ...any) *Error {
	line, col := f.lineCol(off)
	return &Error{Path: f.Path, Line: line, Col: col, Msg: fmt.Sprintf(msg, a...)}
}

// checkShape checks the header against the sections present, and every
// parameter against its section.
func (f *File) checkShape() error {
	if err := f.checkOutcome(); err != nil {
		return err
	}
	if f.Header.Transaction == TxSplit {
		switch {
		case f.Header.Outcome != OutcomeRows:
			return f.Header.errAt(f, "transaction", "split needs outcome: rows (it commits the @claim before the @effect)")
		case !f.Header.Broken:
			return f.Header.errAt(f, "transaction", "split is the article's split-commit bug: only a negative control (broken: true) may use it")
		}
	}
	if err := f.checkExternal(); err != nil {
		return err
	}
	return f.checkParams()
}

// ExternalBeforeCommit is the header "external: before-commit": the file
// has an external step, run in the event's transaction after @effect
// applied and before the commit (the ext-key pattern).
const ExternalBeforeCommit = "before-commit"

// checkExternal checks the header's external step against the sections:
// the header and an @external section of one statement go together, with
// outcome: rows in one transaction.
func (f *File) checkExternal() error {
	h := f.Header
	n := len(f.sections[External])
	bad := func(msg string) error { return &Error{Path: f.Path, Section: External.String(), Msg: msg} }
	switch {
	case h.External == "" && f.marked[External]:
		return bad("@external needs the header line 'external: " + ExternalBeforeCommit + "', which says when the harness calls the external service")
	case h.External == "":
		return nil
	case h.Outcome != OutcomeRows:
		return h.errAt(f, "external", "needs outcome: rows: the harness calls the service after @effect changed one row, before the commit")
	case h.Transaction != TxOne:
		return h.errAt(f, "external", "needs transaction: one: the call happens inside the event's transaction")
	case n != 1:
		return bad(fmt.Sprintf("external: %s needs exactly one @external statement (it returns at most one row: request_key and amount), found %d", ExternalBeforeCommit, n))
	}
	return nil
}

// checkOutcome infers the outcome mode from the sections when the header
// does not name it, and checks the sections fit it.
func (f *File) checkOutcome() error {
	has := func(s Section) bool { return len(f.sections[s]) > 0 }
	if f.Header.Outcome == "" {
		// Inferred from the sections, so a minimal file needs no header.
		switch {
		case has(Batch):
			f.Header.Outcome = OutcomeBatch
		case has(Claim) || has(Effect):
			f.Header.Outcome = OutcomeRows
		default:
			f.Header.Outcome = OutcomeResult
		}
	}
	bad := func(s Section, msg string, a ...any) error {
		return &Error{Path: f.Path, Section: s.String(), Msg: fmt.Sprintf(msg, a...)}
	}
	mode := f.Header.Outcome
	only := func(allowed ...Section) error {
		names := make([]string, len(allowed))
		for i, s := range allowed {
			names[i] = s.String()
		}
		for _, s := range []Section{Apply, Claim, Effect, Batch} {
			if f.marked[s] && !slices.Contains(allowed, s) {
				return bad(s, "@%s does not belong to outcome: %s (which uses @%s)", s, mode, strings.Join(names, " and @"))
			}
		}
		return nil
	}
	switch mode {
	case OutcomeResult:
		if !has(Apply) {
			return bad(Apply, "outcome: result needs an @apply section with at least one statement (the last one returns the result column)")
		}
		return only(Apply)
	case OutcomeRows:
		if n := len(f.sections[Claim]); n != 1 {
			return bad(Claim, "outcome: rows needs exactly one @claim statement (the inbox INSERT … ON CONFLICT DO NOTHING whose row count says first or duplicate), found %d", n)
		}
		if !has(Effect) {
			return bad(Effect, "outcome: rows needs an @effect section with at least one statement (the conditional business update)")
		}
		return only(Claim, Effect)
	default: // OutcomeBatch: the header accepts no other value
		if !has(Batch) {
			return bad(Batch, "outcome: batch needs a @batch section (the last statement returns one row per event: ordinal and result)")
		}
		return only(Batch)
	}
}

// effectSection is the section of the file's outcome mode that changes
// the business table.
func (f *File) effectSection() Section {
	switch f.Header.Outcome {
	case OutcomeRows:
		return Effect
	case OutcomeBatch:
		return Batch
	}
	return Apply
}

// Line is the 1-based line of byte offset off of the file.
func (f *File) Line(off int) int {
	l, _ := f.lineCol(off)
	return l
}

// lineCol turns a byte offset into a 1-based line and column (in
// characters).
func (f *File) lineCol(off int) (int, int) {
	off = max(0, min(off, len(f.content)))
	before := f.content[:off]
	line := strings.Count(before, "\n") + 1
	col := utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}

// StmtError is an Error about st as a whole, at its start.
func (f *File) StmtError(st *Stmt, msg string, a ...any) *Error {
	return f.stmtErrAt(st, 0, msg, a...)
}

// stmtErrAt is an Error at offset off (relative to st's text) of st.
func (f *File) stmtErrAt(st *Stmt, off int, msg string, a ...any) *Error {
	e := f.errAt(st.Off+off, msg, a...)
	e.Section, e.Index = st.Section.String(), st.Index
	return e
}
