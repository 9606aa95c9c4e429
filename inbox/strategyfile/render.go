package strategyfile

import (
	"regexp"
	"strconv"
	"strings"
)

// Placeholders and rendering. A checked statement is a list of parts
// (text, {{schema}}, {{account}}, a parameter); rendering it for a
// consumer's tables joins them and cannot fail.

// partKind is what one part of a statement is.
type partKind uint8

const (
	partText partKind = iota
	partSchema
	partAccount
	partParam
)

// placeholders are the {{names}} a file may use, each replaced by the
// target's quoted name: {{schema}} the cell's schema, {{account}} the
// consumer's business table in it.
var placeholders = map[string]partKind{"schema": partSchema, "account": partAccount}

// stmtPart is one part of a statement: the span text[start:end] of its
// text and, for a parameter, its $n.
type stmtPart struct {
	kind       partKind
	start, end int
	num        int
}

var placeholder = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// resolve splits st into its parts. The placeholders are found
// everywhere, quotes and function bodies included, because DDL function
// bodies need the schema too; a parameter is never part of one.
func (f *File) resolve(st *Stmt) error {
	add := func(p stmtPart) {
		if p.kind != partText || p.end > p.start {
			st.parts = append(st.parts, p)
		}
	}
	text := func(from, to int) error {
		seg := st.Text[from:to]
		last := 0
		for _, m := range placeholder.FindAllStringSubmatchIndex(seg, -1) {
			kind, ok := placeholders[seg[m[2]:m[3]]]
			if !ok {
				return f.stmtErrAt(st, from+m[0], "unknown placeholder {{%s}}: the placeholders are {{schema}} and {{account}}", seg[m[2]:m[3]])
			}
			add(stmtPart{kind: partText, start: from + last, end: from + m[0]})
			add(stmtPart{kind: kind, start: from + m[0], end: from + m[1]})
			last = m[1]
		}
		add(stmtPart{kind: partText, start: from + last, end: to})
		return nil
	}
	pos := 0
	for _, p := range st.params {
		if err := text(pos, p.start); err != nil {
			return err
		}
		add(stmtPart{kind: partParam, start: p.start, end: p.end, num: st.num(p.name)})
		pos = p.end
	}
	return text(pos, len(st.Text))
}

// names reports whether st uses the placeholder of kind k.
func (st *Stmt) names(k partKind) bool {
	for _, p := range st.parts {
		if p.kind == k {
			return true
		}
	}
	return false
}

// Rendered is a statement ready for the server: parameters numbered,
// placeholders replaced, and a map back to the file for error positions
// (File.Position).
type Rendered struct {
	*Stmt
	SQL   string
	srcOf []int // for each byte of SQL, the byte offset in Stmt.Text
}

// Target names what the placeholders stand for, quoted: {{schema}} the
// cell's schema, {{account}} the consumer's business table in it.
type Target struct{ Schema, Account string }

// Render produces the statement for t.
func (st *Stmt) Render(t Target) *Rendered {
	var b strings.Builder
	var srcOf []int
	for _, p := range st.parts {
		var with string
		switch p.kind {
		case partText:
			b.WriteString(st.Text[p.start:p.end])
			for k := p.start; k < p.end; k++ {
				srcOf = append(srcOf, k)
			}
			continue
		case partSchema:
			with = t.Schema
		case partAccount:
			with = t.Account
		case partParam:
			with = "$" + strconv.Itoa(p.num)
		}
		b.WriteString(with)
		for range len(with) {
			srcOf = append(srcOf, p.start)
		}
	}
	return &Rendered{Stmt: st, SQL: b.String(), srcOf: srcOf}
}

// Position turns a server error position (1-based, in characters of the
// rendered SQL) into the file's line and column; 0 means the statement's
// start.
func (f *File) Position(r *Rendered, position int32) (line, col int) {
	off := 0
	if position > 0 {
		chars := 0
		for i := range r.SQL {
			if chars == int(position)-1 {
				off = r.srcOf[i]
				break
			}
			chars++
		}
	}
	return f.lineCol(r.Off + off)
}
