package strategyfile

import (
	"errors"
	"strings"
	"unicode"
)

// The lexer of strategy files: it reads a section as PostgreSQL does where
// it matters here (quotes, dollar quotes, comments, casts), splits it into
// statements at top-level semicolons and finds the :name parameters
// outside quotes and comments. What the parameters and placeholders mean
// is checked afterwards (params.go, render.go).

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// splitStatements lexes content[start:end] as PostgreSQL does where it
// matters here (quotes, dollar quotes, comments, casts), splits it at
// top-level semicolons and finds :name parameters outside quotes and
// comments.
func (f *File) splitStatements(section Section, start, end int) ([]*Stmt, error) {
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
	f         *File
	s         string
	end       int
	section   Section
	out       []*Stmt
	stmtStart int
	hasCode   bool
	params    []paramRef
}

func (l *lexer) err(off int, msg string, a ...any) error {
	e := l.f.errAt(off, msg, a...)
	e.Section, e.Index = l.section.String(), len(l.out)+1
	return e
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
		st := &Stmt{Section: l.section, Index: len(l.out) + 1, Text: strings.TrimRightFunc(trimmed, unicode.IsSpace), Off: l.stmtStart + lead}
		for _, p := range l.params {
			p.start -= st.Off
			p.end -= st.Off
			st.params = append(st.params, p)
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
	c := l.s[i]
	switch {
	case c == '\'':
		j, err := l.skipQuoted(i, '\'', false)
		if err != nil {
			return 0, l.err(i, "unterminated string literal")
		}
		return j, nil
	case c == '"':
		j, err := l.skipQuoted(i, '"', false)
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
		k, err := l.skipQuoted(j, '\'', true)
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

// skipQuoted returns the offset after the token quoted with q starting
// at i; backslash says whether a backslash escapes the next byte (E'…').
func (l *lexer) skipQuoted(i int, q byte, backslash bool) (int, error) {
	s, end := l.s, l.end
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
