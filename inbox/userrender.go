package inbox

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
func (f *parsedFile) resolve(st *fileStmt) error {
	add := func(p stmtPart) {
		if p.kind != partText || p.end > p.start {
			st.parts = append(st.parts, p)
		}
	}
	text := func(from, to int) error {
		seg := st.text[from:to]
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
	return text(pos, len(st.text))
}

// names reports whether st uses the placeholder of kind k.
func (st *fileStmt) names(k partKind) bool {
	for _, p := range st.parts {
		if p.kind == k {
			return true
		}
	}
	return false
}

// renderedStmt is a statement ready for the server: parameters numbered,
// placeholders replaced, and a map back to the file for error positions.
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

// render produces the statement for t.
func (st *fileStmt) render(t target) *renderedStmt {
	var b strings.Builder
	var srcOf []int
	for _, p := range st.parts {
		var with string
		switch p.kind {
		case partText:
			b.WriteString(st.text[p.start:p.end])
			for k := p.start; k < p.end; k++ {
				srcOf = append(srcOf, k)
			}
			continue
		case partSchema:
			with = t.schema
		case partAccount:
			with = t.account
		case partParam:
			with = "$" + strconv.Itoa(p.num)
		}
		b.WriteString(with)
		for range len(with) {
			srcOf = append(srcOf, p.start)
		}
	}
	return &renderedStmt{fileStmt: st, sql: b.String(), srcOf: srcOf}
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
