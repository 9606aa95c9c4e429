package inbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file reads strategy files: the format (header, sections,
// statements), named parameters and the {{schema}} placeholder, with every
// error pointing at file:line:col, the statement and the parameter. The
// strategy that runs them is in userstrategy.go; the format is documented
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
	Section   string // "ddl", "apply", "claim", "effect", "prune"; "" for the header
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

// FeatureIdempotencyKeys is what a file declares with the header
// "idempotency-keys: true": it handles client idempotency keys (replays
// answered DUPLICATE, a reused key with other content CONFLICT).
const FeatureIdempotencyKeys = "idempotency-keys"

// Transaction modes of an OutcomeRows file.
const (
	// TxOne runs claim and effect in one transaction: the correct way.
	TxOne = "one"
	// TxSplit commits the claim on its own before the effect's
	// transaction: the article's split-commit bug, for negative controls.
	TxSplit = "split"
)

// EventParams are the parameters an @apply, @claim or @effect statement may
// use, each with what it carries. Values are bound with their Go types
// (text, bigint, timestamptz); cast where PostgreSQL cannot infer a type.
var EventParams = map[string]string{
	"consumer":        "the consumer name (text): the processing responsibility, first part of the inbox key",
	"source":          "the event's CloudEvents source (text)",
	"event_id":        "the event's CloudEvents id (text); (source, event_id) is the identity",
	"event_type":      "the event's CloudEvents type (text)",
	"event_time":      "the event's occurrence time (timestamptz, NULL when absent)",
	"aggregate_id":    "the aggregate (account) id, the CloudEvents subject (text)",
	"version":         "the aggregate version the event carries (bigint)",
	"amount":          "the increment, or the full balance of a snapshot (bigint)",
	"kind":            "'increment' or 'snapshot' (text)",
	"idempotency_key": "the client idempotency key, '' when absent (text)",
	"tenant":          "the idempotency key's tenant, '' when absent (text)",
	"operation":       "the idempotency key's operation, '' when absent (text)",
	"request_hash":    "hex SHA-256 of the request content (tenant, operation, subject, kind, amount) for idempotency conflicts (text)",
}

// BatchParams are the parameters of @batch statements: every EventParams
// name, bound as an array over the batch's events in delivery order
// (text[], bigint[], timestamptz[]), and :ordinal, their positions
// 1..n (int[]).
var BatchParams = func() map[string]string {
	m := map[string]string{"ordinal": "the events' positions in the batch, 1..n (int[]): the last statement returns one row per ordinal"}
	for k, v := range EventParams {
		if k == "consumer" {
			m[k] = v
			continue
		}
		m[k] = "array over the batch's events of " + v
	}
	return m
}()

// PruneParams are the parameters a @prune statement may use.
var PruneParams = map[string]string{
	"before": "delete inbox rows applied before this time (timestamptz)",
	"limit":  "delete at most this many rows per statement (bigint)",
}

// headerKeys are the settings a file's header may hold.
var headerKeys = map[string]string{
	"name":        "a display name (the strategy's registry name is always file:NAME.sql@HASH)",
	"description": "one line saying what the SQL does",
	"broken":      "true for a negative control that is expected to FAIL",
	"outcome":     "result, rows or batch",
	"transaction": "one (default) or split (negative controls only)",
	// Scope: what the file implements; scenarios testing something it
	// does not declare are not applicable to it.
	FeatureIdempotencyKeys: "true when the file handles client idempotency keys (default false)",
}

// sections a file may have, in no particular order.
var sectionNames = map[string]bool{"ddl": true, "apply": true, "claim": true, "effect": true, "prune": true, "batch": true}

// fileStmt is one statement of a section.
type fileStmt struct {
	section string
	index   int    // 1-based within the section
	text    string // source text, trimmed
	off     int    // byte offset of text in the file
	params  []paramRef
	names   []string // distinct parameter names in $n order
}

// paramRef is one :name in a statement (offsets relative to text).
type paramRef struct {
	start, end int // the span of ":name"
	name       string
}

// parsedFile is a strategy file after the syntax checks.
type parsedFile struct {
	path, base, hash string
	content          string
	header           map[string]string
	sections         map[string][]*fileStmt
}

var (
	headerLine  = regexp.MustCompile(`^--\s*([a-z_-]+)\s*:\s*(.*?)\s*$`)
	sectionLine = regexp.MustCompile(`^--\s*@([A-Za-z_]+)\s*$`)
	placeholder = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)
)

// parseStrategyFile checks a file's format and parameters without a
// database.
func parseStrategyFile(path string, content []byte) (*parsedFile, error) {
	sum := sha256.Sum256(content)
	f := &parsedFile{path: path, base: filepath.Base(path), hash: hex.EncodeToString(sum[:])[:8], content: string(content),
		header: map[string]string{}, sections: map[string][]*fileStmt{}}
	ferr := func(off int, msg string, a ...any) error {
		line, col := f.lineCol(off)
		return &FileError{Path: path, Line: line, Col: col, Msg: fmt.Sprintf(msg, a...)}
	}
	if !utf8.Valid(content) {
		return nil, &FileError{Path: path, Msg: "not UTF-8 text"}
	}
	if strings.ContainsAny(f.base, ", *") {
		return nil, &FileError{Path: path, Msg: "the file name must not contain commas, spaces or '*' (it names the strategy)"}
	}

	// Lines before the first section marker are the header: "-- key: value"
	// settings among free comments. Section markers "-- @name" open a
	// section that runs to the next marker.
	type span struct {
		name       string
		start, end int
		markerOff  int
	}
	var spans []span
	off := 0
	for _, line := range strings.SplitAfter(f.content, "\n") {
		lineOff := off
		off += len(line)
		t := strings.TrimSpace(line)
		if m := sectionLine.FindStringSubmatch(t); m != nil {
			name := m[1]
			if !sectionNames[name] {
				return nil, ferr(lineOff, "unknown section @%s: sections are @ddl, @apply, @claim, @effect, @batch and @prune", name)
			}
			for _, s := range spans {
				if s.name == name {
					return nil, ferr(lineOff, "section @%s appears twice (first at line %d)", name, f.line(s.markerOff))
				}
			}
			if n := len(spans); n > 0 {
				spans[n-1].end = lineOff
			}
			spans = append(spans, span{name: name, start: off, end: len(f.content), markerOff: lineOff})
			continue
		}
		if len(spans) > 0 {
			continue
		}
		// The header.
		if t == "" || !strings.HasPrefix(t, "--") {
			if t != "" {
				return nil, ferr(lineOff, "SQL before the first section marker: start each part with a line '-- @ddl', '-- @apply', '-- @claim', '-- @effect', '-- @batch' or '-- @prune'")
			}
			continue
		}
		m := headerLine.FindStringSubmatch(t)
		if m == nil {
			continue // a free comment
		}
		key, val := m[1], m[2]
		if _, ok := headerKeys[key]; !ok {
			// A typo must not silently change what the file means.
			return nil, ferr(lineOff, "unknown header setting %q: settings are %s (write free comments without 'word:' at the start)", key, strings.Join(sortedKeys(headerKeys), ", "))
		}
		if _, dup := f.header[key]; dup {
			return nil, ferr(lineOff, "header setting %q appears twice", key)
		}
		f.header[key] = val
	}
	for _, s := range spans {
		stmts, err := f.splitStatements(s.name, s.start, s.end)
		if err != nil {
			return nil, err
		}
		f.sections[s.name] = stmts
	}
	if err := f.checkShape(); err != nil {
		return nil, err
	}
	// Render once to find unknown {{placeholders}} now, not at the first
	// cell.
	for _, stmts := range f.sections {
		for _, st := range stmts {
			if _, err := f.render(st, target{`"inboxbench"`, `"inboxbench"."account"`}); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// checkShape checks the header values against the sections present.
func (f *parsedFile) checkShape() error {
	bad := func(section, msg string, a ...any) error {
		return &FileError{Path: f.path, Section: section, Msg: fmt.Sprintf(msg, a...)}
	}
	for _, key := range []string{"broken", FeatureIdempotencyKeys} {
		switch v := f.header[key]; v {
		case "", "false", "true":
		default:
			return bad("", "header %s: %q: want true or false", key, v)
		}
	}
	if err := f.checkOutcome(bad); err != nil {
		return err
	}
	switch tx := f.header["transaction"]; tx {
	case "", TxOne:
		f.header["transaction"] = TxOne
	case TxSplit:
		if f.header["outcome"] != OutcomeRows {
			return bad("", "header transaction: split needs outcome: rows (it commits the @claim before the @effect)")
		}
		if f.header["broken"] != "true" {
			return bad("", "header transaction: split is the article's split-commit bug: only a negative control (broken: true) may use it")
		}
	default:
		return bad("", "header transaction: %q: want one or split", tx)
	}
	return f.checkParams()
}

// checkOutcome infers the outcome mode from the sections when the header
// does not name it, and checks the sections fit it.
func (f *parsedFile) checkOutcome(bad func(section, msg string, a ...any) error) error {
	outcome := f.header["outcome"]
	if outcome == "" {
		// Inferred from the sections, so a minimal file needs no header.
		switch {
		case len(f.sections["batch"]) > 0:
			outcome = OutcomeBatch
		case len(f.sections["claim"]) > 0 || len(f.sections["effect"]) > 0:
			outcome = OutcomeRows
		default:
			outcome = OutcomeResult
		}
		f.header["outcome"] = outcome
	}
	only := func(mode string, allowed ...string) error {
		for _, s := range []string{"apply", "claim", "effect", "batch"} {
			if _, ok := f.sections[s]; ok && !slices.Contains(allowed, s) {
				return bad(s, "@%s does not belong to outcome: %s (which uses @%s)", s, mode, strings.Join(allowed, " and @"))
			}
		}
		return nil
	}
	switch outcome {
	case OutcomeResult:
		if len(f.sections["apply"]) == 0 {
			return bad("apply", "outcome: result needs an @apply section with at least one statement (the last one returns the result column)")
		}
		return only(outcome, "apply")
	case OutcomeRows:
		if n := len(f.sections["claim"]); n != 1 {
			return bad("claim", "outcome: rows needs exactly one @claim statement (the inbox INSERT … ON CONFLICT DO NOTHING whose row count says first or duplicate), found %d", n)
		}
		if len(f.sections["effect"]) == 0 {
			return bad("effect", "outcome: rows needs an @effect section with at least one statement (the conditional business update)")
		}
		return only(outcome, "claim", "effect")
	case OutcomeBatch:
		if len(f.sections["batch"]) == 0 {
			return bad("batch", "outcome: batch needs a @batch section (the last statement returns one row per event: ordinal and result)")
		}
		return only(outcome, "batch")
	}
	return bad("", "header outcome: %q: want result (a returned result column), rows (affected-row counts) or batch (a @batch section)", outcome)
}

// checkParams checks every parameter against its section's names.
func (f *parsedFile) checkParams() error {
	for _, s := range []string{"ddl", "apply", "claim", "effect", "batch", "prune"} {
		allowed := EventParams
		switch s {
		case "ddl":
			allowed = nil
		case "prune":
			allowed = PruneParams
		case "batch":
			allowed = BatchParams
		}
		for _, st := range f.sections[s] {
			for _, p := range st.params {
				if _, ok := allowed[p.name]; ok {
					continue
				}
				line, col := f.lineCol(st.off + p.start)
				e := &FileError{Path: f.path, Line: line, Col: col, Section: s, Index: st.index, Param: p.name}
				switch {
				case allowed == nil:
					e.Msg = "@ddl takes no parameters (it runs once, before any event)"
				default:
					e.Msg = "unknown parameter: known are " + paramList(allowed)
				}
				return e
			}
		}
	}
	return nil
}

func paramList(m map[string]string) string {
	keys := sortedKeys(m)
	for i, k := range keys {
		keys[i] = ":" + k
	}
	return strings.Join(keys, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// splitStatements lexes content[start:end] as PostgreSQL does where it
// matters here (quotes, dollar quotes, comments, casts), splits it at
// top-level semicolons and finds :name parameters outside quotes and
// comments.
func (f *parsedFile) splitStatements(section string, start, end int) ([]*fileStmt, error) {
	l := &lexer{f: f, s: f.content[:end], end: end, section: section, stmtStart: start}
	for i := start; i < end; {
		c := l.s[i]
		var next int
		var err error
		switch {
		case c == '-' && i+1 < end && l.s[i+1] == '-':
			next = l.lineComment(i)
		case c == '/' && i+1 < end && l.s[i+1] == '*':
			next, err = l.blockComment(i)
		case c == ';':
			l.flush(i)
			next = i + 1
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			next = i + 1
		default:
			l.hasCode = true
			next, err = l.token(i)
		}
		if err != nil {
			return nil, err
		}
		i = next
	}
	l.flush(end)
	return l.out, nil
}

// lexer is splitStatements' state: the statements found so far and the
// one being read.
type lexer struct {
	f         *parsedFile
	s         string
	end       int
	section   string
	out       []*fileStmt
	stmtStart int
	hasCode   bool
	params    []paramRef
}

func (l *lexer) err(off int, msg string, a ...any) error {
	line, col := l.f.lineCol(off)
	return &FileError{Path: l.f.path, Line: line, Col: col, Section: l.section, Index: len(l.out) + 1, Msg: fmt.Sprintf(msg, a...)}
}

// flush ends the statement before offset at, if it holds any code.
func (l *lexer) flush(at int) {
	if l.hasCode {
		raw := l.s[l.stmtStart:at]
		// One trim for both the text and its offset: a statement that
		// starts with a vertical tab or U+00A0 must not shift its
		// parameters' positions.
		trimmed := strings.TrimLeftFunc(raw, unicode.IsSpace)
		lead := len(raw) - len(trimmed)
		st := &fileStmt{section: l.section, index: len(l.out) + 1, text: strings.TrimRightFunc(trimmed, unicode.IsSpace), off: l.stmtStart + lead}
		seen := map[string]bool{}
		for _, p := range l.params {
			p.start -= st.off
			p.end -= st.off
			st.params = append(st.params, p)
			if !seen[p.name] {
				seen[p.name] = true
				st.names = append(st.names, p.name)
			}
		}
		l.out = append(l.out, st)
	}
	l.stmtStart, l.hasCode, l.params = at+1, false, nil
}

func (l *lexer) lineComment(i int) int {
	for i < l.end && l.s[i] != '\n' {
		i++
	}
	return i
}

// blockComment skips a /* comment */, nested as PostgreSQL nests them.
func (l *lexer) blockComment(i int) (int, error) {
	depth, j := 1, i+2
	for j < l.end && depth > 0 {
		switch {
		case l.s[j] == '/' && j+1 < l.end && l.s[j+1] == '*':
			depth, j = depth+1, j+2
		case l.s[j] == '*' && j+1 < l.end && l.s[j+1] == '/':
			depth, j = depth-1, j+2
		default:
			j++
		}
	}
	if depth > 0 {
		return 0, l.err(i, "unterminated /* comment")
	}
	return j, nil
}

// token skips one token of code starting at i, recording a parameter.
func (l *lexer) token(i int) (int, error) {
	s, end, c := l.s, l.end, l.s[i]
	switch {
	case c == '\'':
		j, err := skipQuoted(s, i, end, '\'', false)
		if err != nil {
			return 0, l.err(i, "unterminated string literal")
		}
		return j, nil
	case c == '"':
		j, err := skipQuoted(s, i, end, '"', false)
		if err != nil {
			return 0, l.err(i, "unterminated quoted identifier")
		}
		return j, nil
	case isIdentStart(c):
		return l.word(i)
	case c == '$':
		return l.dollar(i)
	case c == ':':
		return l.colon(i), nil
	}
	return i + 1, nil
}

// word skips an identifier or keyword, and an E'…' string (which takes
// backslash escapes).
func (l *lexer) word(i int) (int, error) {
	s, end, c := l.s, l.end, l.s[i]
	j := i
	for j < end && isIdentChar(s[j]) {
		j++
	}
	if j == i+1 && (c == 'e' || c == 'E') && j < end && s[j] == '\'' {
		k, err := skipQuoted(s, j, end, '\'', true)
		if err != nil {
			return 0, l.err(i, "unterminated string literal")
		}
		j = k
	}
	return j, nil
}

// dollar skips a $tag$ … $tag$ string, and refuses a positional $1.
func (l *lexer) dollar(i int) (int, error) {
	s, end := l.s, l.end
	j := i + 1
	if j < end && s[j] >= '0' && s[j] <= '9' {
		return 0, l.err(i, "positional parameter %s: use named parameters (:event_id, :version …), which are numbered for you", s[i:j+1])
	}
	for j < end && isIdentChar(s[j]) && s[j] != '$' {
		j++
	}
	if j >= end || s[j] != '$' {
		return i + 1, nil
	}
	tag := s[i : j+1]
	k := strings.Index(s[j+1:end], tag)
	if k < 0 {
		return 0, l.err(i, "unterminated dollar-quoted string %s", tag)
	}
	return j + 1 + k + len(tag), nil
}

// colon skips a :: cast, or records a :name parameter.
func (l *lexer) colon(i int) int {
	s, end := l.s, l.end
	switch {
	case i+1 < end && s[i+1] == ':':
		return i + 2
	case i+1 < end && isIdentStart(s[i+1]) && s[i+1] < 0x80:
		j := i + 1
		for j < end && (isIdentStart(s[j]) || s[j] >= '0' && s[j] <= '9') && s[j] < 0x80 {
			j++
		}
		l.params = append(l.params, paramRef{start: i, end: j, name: s[i+1 : j]})
		return j
	}
	return i + 1
}

// skipQuoted returns the offset after the quoted token starting at i.
func skipQuoted(s string, i, end int, q byte, backslash bool) (int, error) {
	j := i + 1
	for j < end {
		switch {
		case backslash && s[j] == '\\':
			j += 2
		case s[j] == q && j+1 < end && s[j+1] == q:
			j += 2
		case s[j] == q:
			return j + 1, nil
		default:
			j++
		}
	}
	return 0, errors.New("unterminated")
}

// renderedStmt is a statement ready for the server: parameters numbered,
// {{schema}} replaced, and a map back to the file for error positions.
type renderedStmt struct {
	*fileStmt
	sql   string
	srcOf []int // for each byte of sql, the byte offset in fileStmt.text
	// asText marks parameters the server typed as text (e.g. :version in
	// "CASE WHEN :version = '1'"): pgx cannot encode an int64 or a time
	// as text, so they are sent as their text form. Set by Prepare.
	asText []bool
}

// target names what the placeholders stand for, quoted: {{schema}} the
// cell's schema, {{account}} the consumer's business table in it.
type target struct{ schema, account string }

// render produces the statement for t. The placeholders are replaced
// everywhere, quotes and function bodies included, because DDL function
// bodies need the schema too.
func (f *parsedFile) render(st *fileStmt, t target) (*renderedStmt, error) {
	num := map[string]int{}
	for i, n := range st.names {
		num[n] = i + 1
	}
	var b strings.Builder
	var srcOf []int
	emit := func(text string, src int, verbatim bool) {
		for k := 0; k < len(text); k++ {
			if verbatim {
				srcOf = append(srcOf, src+k)
			} else {
				srcOf = append(srcOf, src)
			}
		}
		b.WriteString(text)
	}
	copyText := func(from, to int) error {
		seg := st.text[from:to]
		last := 0
		for _, m := range placeholder.FindAllStringSubmatchIndex(seg, -1) {
			name := seg[m[2]:m[3]]
			var with string
			switch name {
			case "schema":
				with = t.schema
			case "account":
				with = t.account
			default:
				line, col := f.lineCol(st.off + from + m[0])
				return &FileError{Path: f.path, Line: line, Col: col, Section: st.section, Index: st.index,
					Msg: fmt.Sprintf("unknown placeholder {{%s}}: the placeholders are {{schema}} and {{account}}", name)}
			}
			emit(seg[last:m[0]], from+last, true)
			emit(with, from+m[0], false)
			last = m[1]
		}
		emit(seg[last:], from+last, true)
		return nil
	}
	pos := 0
	for _, p := range st.params {
		if err := copyText(pos, p.start); err != nil {
			return nil, err
		}
		emit(fmt.Sprintf("$%d", num[p.name]), p.start, false)
		pos = p.end
	}
	if err := copyText(pos, len(st.text)); err != nil {
		return nil, err
	}
	return &renderedStmt{fileStmt: st, sql: b.String(), srcOf: srcOf}, nil
}

// errorAt turns a server error position (1-based, in characters of the
// rendered SQL) into the file's line and column; 0 means the statement's
// start.
func (f *parsedFile) errorAt(r *renderedStmt, position int32) (int, int) {
	off := 0
	if position > 0 {
		chars := 0
		for i := range r.sql {
			if chars == int(position)-1 {
				off = r.srcOf[i]
				break
			}
			chars++
		}
	}
	return f.lineCol(r.off + off)
}
