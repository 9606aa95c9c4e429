package inbox

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

// This file reads strategy files: the format (header, sections,
// statements), with every error pointing at file:line:col, the statement
// and the parameter. Reading a file yields a parsedFile, checked once:
// the strategy that runs it (userstrategy.go, userapply.go) renders and
// binds its statements but never checks them again. The header is in
// userheader.go, the named parameters in userparams.go, the lexer in
// userlex.go, the placeholders in userrender.go; the format is documented
// in examples/strategies/README.md.

// ErrStrategyFile marks a problem in a user strategy file (format, unknown
// parameter, SQL the server rejects): the user fixes the file. The CLI
// exits 2 on it. Failures to reach the database do not match it.
var ErrStrategyFile = errors.New("bad strategy file")

// FileError is an error in a strategy file. Every field that is known is
// named in the message, so a user can go straight to the line.
type FileError struct {
	Path      string
	Line, Col int    // 0 when the error is about the whole file
	Section   string // "ddl", "apply", "claim", "effect", "batch", "prune", "external"; "" for the header
	Index     int    // 1-based statement number within Section; 0 for the section
	Param     string // the parameter, without its colon
	Msg       string
	Err       error // the server's error, if any
}

func (e *FileError) Error() string {
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

func (e *FileError) Unwrap() error        { return e.Err }
func (e *FileError) Is(target error) bool { return target == ErrStrategyFile }

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

// sectionID is a section of a strategy file.
type sectionID int

const (
	secDDL sectionID = iota
	secApply
	secClaim
	secEffect
	secBatch
	secPrune
	secExternal
	numSections
)

// sectionNames are the sections' names (the "-- @name" markers), in the
// order they are checked and prepared.
var sectionNames = [numSections]string{"ddl", "apply", "claim", "effect", "batch", "prune", "external"}

func (s sectionID) String() string { return sectionNames[s] }

// markers lists the sections as a user writes them: "@ddl, … and @prune".
func markers() string {
	m := make([]string, numSections)
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

// fileStmt is one statement of a section, checked: its parameters are
// known for its section and numbered, its placeholders resolved.
type fileStmt struct {
	section sectionID
	index   int    // 1-based within the section
	text    string // source text, trimmed
	off     int    // byte offset of text in the file
	params  []paramRef
	// args are the parameters in $n order: how each is bound.
	args []*fileParam
	// parts are text, placeholders and parameters in order: what render
	// joins for a schema and table.
	parts []stmtPart
}

// paramRef is one :name in a statement (offsets relative to text).
type paramRef struct {
	start, end int // the span of ":name"
	name       string
}

// parsedFile is a strategy file after every check that needs no
// database: the value the strategy runs.
type parsedFile struct {
	path, base, hash string
	content          string
	header           fileHeader
	sections         [numSections][]*fileStmt
	marked           [numSections]bool // sections with a marker, even an empty one
	// tables is the warning for a file whose effect statements never name
	// {{account}} (userscope.go); "" when they do.
	tables string
}

var sectionLine = regexp.MustCompile(`^--\s*@([A-Za-z_]+)\s*$`)

// parseStrategyFile checks a file's format and parameters without a
// database.
func parseStrategyFile(path string, content []byte) (*parsedFile, error) {
	sum := sha256.Sum256(content)
	f := &parsedFile{path: path, base: filepath.Base(path), hash: hex.EncodeToString(sum[:])[:8], content: string(content)}
	if !utf8.Valid(content) {
		return nil, &FileError{Path: path, Msg: "not UTF-8 text"}
	}
	if strings.ContainsAny(f.base, ", *") {
		return nil, &FileError{Path: path, Msg: "the file name must not contain commas, spaces or '*' (it names the strategy)"}
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

// sectionSpan is one section's body: content[start:end].
type sectionSpan struct {
	id         sectionID
	start, end int
	markerOff  int
}

// splitSections reads the lines before the first section marker as the
// header ("-- key: value" settings among free comments) and returns the
// sections: a marker "-- @name" opens one that runs to the next marker.
func (f *parsedFile) splitSections() ([]sectionSpan, error) {
	var spans []sectionSpan
	hp := newHeaderParser(f)
	off := 0
	for _, line := range strings.SplitAfter(f.content, "\n") {
		lineOff := off
		off += len(line)
		t := strings.TrimSpace(line)
		if m := sectionLine.FindStringSubmatch(t); m != nil {
			id := sectionID(slices.Index(sectionNames[:], m[1]))
			if id < 0 {
				return nil, f.errAt(lineOff, "unknown section @%s: sections are %s", m[1], markers())
			}
			for _, s := range spans {
				if s.id == id {
					return nil, f.errAt(lineOff, "section @%s appears twice (first at line %d)", id, f.line(s.markerOff))
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
			m := make([]string, numSections)
			for i, n := range sectionNames {
				m[i] = "'-- @" + n + "'"
			}
			return nil, f.errAt(lineOff, "SQL before the first section marker: start each part with a line %s", orList(m, "or"))
		}
		if err := hp.line(t, lineOff); err != nil {
			return nil, err
		}
	}
	f.header = hp.h
	return spans, nil
}

// errAt is a FileError at byte offset off of the file.
func (f *parsedFile) errAt(off int, msg string, a ...any) *FileError {
	line, col := f.lineCol(off)
	return &FileError{Path: f.path, Line: line, Col: col, Msg: fmt.Sprintf(msg, a...)}
}

// checkShape checks the header against the sections present, and every
// parameter against its section.
func (f *parsedFile) checkShape() error {
	if err := f.checkOutcome(); err != nil {
		return err
	}
	if f.header.transaction == TxSplit {
		switch {
		case f.header.outcome != OutcomeRows:
			return f.header.errAt(f, "transaction", "split needs outcome: rows (it commits the @claim before the @effect)")
		case !f.header.broken:
			return f.header.errAt(f, "transaction", "split is the article's split-commit bug: only a negative control (broken: true) may use it")
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
func (f *parsedFile) checkExternal() error {
	h := f.header
	n := len(f.sections[secExternal])
	bad := func(msg string) error { return &FileError{Path: f.path, Section: secExternal.String(), Msg: msg} }
	switch {
	case h.external == "" && f.marked[secExternal]:
		return bad("@external needs the header line 'external: " + ExternalBeforeCommit + "', which says when the harness calls the external service")
	case h.external == "":
		return nil
	case h.outcome != OutcomeRows:
		return h.errAt(f, "external", "needs outcome: rows: the harness calls the service after @effect changed one row, before the commit")
	case h.transaction != TxOne:
		return h.errAt(f, "external", "needs transaction: one: the call happens inside the event's transaction")
	case n != 1:
		return bad(fmt.Sprintf("external: %s needs exactly one @external statement (it returns at most one row: request_key and amount), found %d", ExternalBeforeCommit, n))
	}
	return nil
}

// checkOutcome infers the outcome mode from the sections when the header
// does not name it, and checks the sections fit it.
func (f *parsedFile) checkOutcome() error {
	has := func(s sectionID) bool { return len(f.sections[s]) > 0 }
	if f.header.outcome == "" {
		// Inferred from the sections, so a minimal file needs no header.
		switch {
		case has(secBatch):
			f.header.outcome = OutcomeBatch
		case has(secClaim) || has(secEffect):
			f.header.outcome = OutcomeRows
		default:
			f.header.outcome = OutcomeResult
		}
	}
	bad := func(s sectionID, msg string, a ...any) error {
		return &FileError{Path: f.path, Section: s.String(), Msg: fmt.Sprintf(msg, a...)}
	}
	mode := f.header.outcome
	only := func(allowed ...sectionID) error {
		names := make([]string, len(allowed))
		for i, s := range allowed {
			names[i] = s.String()
		}
		for _, s := range []sectionID{secApply, secClaim, secEffect, secBatch} {
			if f.marked[s] && !slices.Contains(allowed, s) {
				return bad(s, "@%s does not belong to outcome: %s (which uses @%s)", s, mode, strings.Join(names, " and @"))
			}
		}
		return nil
	}
	switch mode {
	case OutcomeResult:
		if !has(secApply) {
			return bad(secApply, "outcome: result needs an @apply section with at least one statement (the last one returns the result column)")
		}
		return only(secApply)
	case OutcomeRows:
		if n := len(f.sections[secClaim]); n != 1 {
			return bad(secClaim, "outcome: rows needs exactly one @claim statement (the inbox INSERT … ON CONFLICT DO NOTHING whose row count says first or duplicate), found %d", n)
		}
		if !has(secEffect) {
			return bad(secEffect, "outcome: rows needs an @effect section with at least one statement (the conditional business update)")
		}
		return only(secClaim, secEffect)
	default: // OutcomeBatch: the header accepts no other value
		if !has(secBatch) {
			return bad(secBatch, "outcome: batch needs a @batch section (the last statement returns one row per event: ordinal and result)")
		}
		return only(secBatch)
	}
}

// effectSection is the section of the file's outcome mode that changes
// the business table.
func (f *parsedFile) effectSection() sectionID {
	switch f.header.outcome {
	case OutcomeRows:
		return secEffect
	case OutcomeBatch:
		return secBatch
	}
	return secApply
}

func (f *parsedFile) line(off int) int {
	l, _ := f.lineCol(off)
	return l
}

// lineCol turns a byte offset into a 1-based line and column (in
// characters).
func (f *parsedFile) lineCol(off int) (int, int) {
	off = max(0, min(off, len(f.content)))
	before := f.content[:off]
	line := strings.Count(before, "\n") + 1
	col := utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}

// stmtErrAt is a FileError at offset off (relative to st's text) of st.
func (f *parsedFile) stmtErrAt(st *fileStmt, off int, msg string, a ...any) *FileError {
	e := f.errAt(st.off+off, msg, a...)
	e.Section, e.Index = st.section.String(), st.index
	return e
}
