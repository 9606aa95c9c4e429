package service

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// test_decoding, PostgreSQL's contrib output plugin, writes one text line
// per change and, with include-timestamp, one per commit:
//
//	BEGIN 7123
//	table lab.account: UPDATE: id[text]:'acct-000001' balance[bigint]:10 version[bigint]:2
//	COMMIT 7123 (at 2026-12-07 08:00:00.123456+00)
//
// A value is quoted ('…', with '' inside) unless it is a number, a
// boolean or null; a type may hold spaces and brackets ("character
// varying", "integer[]"); with REPLICA IDENTITY FULL an UPDATE or DELETE
// carries "old-key:" and "new-tuple:" parts. These functions read those
// lines without a database, so the attribution is tested on fixed lines
// (decode_test.go).

// Change is one committed change of the effects table: the new state of
// an aggregate, and when its transaction committed.
type Change struct {
	Op        string // INSERT, UPDATE or DELETE
	Aggregate string
	State     int64
	Version   int64
	Commit    time.Time
	XID       uint32
}

// columns reads the "name[type]:value" list of a change line into a map
// of name → value (quotes removed, null as ok=false entries absent). With
// an old-key part, only the new tuple is kept.
func columns(s string) (map[string]string, error) {
	if i := strings.Index(s, "new-tuple: "); i >= 0 {
		s = s[i+len("new-tuple: "):]
	}
	out := map[string]string{}
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		open := strings.IndexByte(s, '[')
		if open <= 0 {
			return nil, fmt.Errorf("column without a [type] at %q", cut(s))
		}
		name := unquoteName(s[:open])
		end := closingBracket(s, open)
		if end < 0 || end+1 >= len(s) || s[end+1] != ':' {
			return nil, fmt.Errorf("column %s: no ':' after its type", name)
		}
		v, rest, null, err := value(s[end+2:])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", name, err)
		}
		if !null {
			out[name] = v
		}
		s = rest
	}
	return out, nil
}

// closingBracket finds the ']' that closes the '[' at open, counting the
// brackets of array types.
func closingBracket(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}

// value reads one value and returns what follows it.
func value(s string) (v, rest string, null bool, err error) {
	if !strings.HasPrefix(s, "'") {
		end := strings.IndexByte(s, ' ')
		if end < 0 {
			end = len(s)
		}
		v = s[:end]
		return v, s[end:], v == "null", nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		return b.String(), s[i+1:], false, nil
	}
	return "", "", false, errors.New("unterminated quoted value")
}

// unquoteName undoes the identifier quoting test_decoding applies to a
// column name that needs it ("Balance").
func unquoteName(n string) string {
	if len(n) >= 2 && n[0] == '"' && n[len(n)-1] == '"' {
		return strings.ReplaceAll(n[1:len(n)-1], `""`, `"`)
	}
	return n
}

func cut(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// decoder turns the lines of one table's changes and the commits around
// them into Changes stamped with their commit time.
type decoder struct {
	prefix  string // "table schema.table: "
	effects Effects
	pending []Change // changes of the transaction not yet committed
}

func newDecoder(schema string, e Effects) *decoder {
	return &decoder{prefix: "table " + quoteIdentIfNeeded(schema) + "." + quoteIdentIfNeeded(e.Table) + ": ", effects: e}
}

// line reads one decoded line; at a COMMIT it returns the transaction's
// changes, stamped.
func (d *decoder) line(xid uint32, data string) ([]Change, error) {
	if strings.HasPrefix(data, "COMMIT") {
		at, err := commitTime(data)
		if err != nil {
			return nil, err
		}
		out := d.pending
		d.pending = nil
		for i := range out {
			out[i].Commit = at
		}
		return out, nil
	}
	if !strings.HasPrefix(data, d.prefix) {
		return nil, nil // BEGIN, or another table
	}
	rest := data[len(d.prefix):]
	op, cols, ok := strings.Cut(rest, ": ")
	if !ok {
		op, cols = strings.TrimSuffix(rest, ":"), ""
	}
	if op != "INSERT" && op != "UPDATE" && op != "DELETE" {
		return nil, nil // TRUNCATE, or a message
	}
	c, err := d.change(op, cols)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (in %q)", d.effects.Table, err, cut(data))
	}
	c.XID = xid
	d.pending = append(d.pending, c)
	return nil, nil
}

// change reads the effects columns of one change line.
func (d *decoder) change(op, cols string) (Change, error) {
	m, err := columns(cols)
	if err != nil {
		return Change{}, err
	}
	c := Change{Op: op}
	var ok bool
	if c.Aggregate, ok = m[d.effects.Aggregate]; !ok {
		return c, fmt.Errorf("no %s column (the aggregate id): a DELETE needs REPLICA IDENTITY FULL, or the column name is wrong", d.effects.Aggregate)
	}
	if op == "DELETE" {
		return c, nil
	}
	for _, f := range []struct {
		col string
		to  *int64
	}{{d.effects.State, &c.State}, {d.effects.Version, &c.Version}} {
		v, ok := m[f.col]
		if !ok {
			return c, fmt.Errorf("no %s column", f.col)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("column %s %q is not a whole number", f.col, v)
		}
		*f.to = n
	}
	return c, nil
}

// commitLayout is how a session with TimeZone UTC and DateStyle ISO
// writes a timestamptz.
const commitLayout = "2006-01-02 15:04:05.999999-07"

// commitTime reads "COMMIT 7123 (at 2026-12-07 08:00:00.123456+00)".
func commitTime(line string) (time.Time, error) {
	i := strings.Index(line, "(at ")
	if i < 0 || !strings.HasSuffix(line, ")") {
		return time.Time{}, fmt.Errorf("commit line %q has no timestamp: the slot must be read with include-timestamp", cut(line))
	}
	t, err := time.Parse(commitLayout, line[i+4:len(line)-1])
	if err != nil {
		return time.Time{}, fmt.Errorf("commit line %q: %w (the reading session must use TimeZone UTC, DateStyle ISO)", cut(line), err)
	}
	return t, nil
}

// quoteIdentIfNeeded quotes an identifier as PostgreSQL's
// quote_identifier does: only when it is not all lower-case letters,
// digits and underscores starting with a letter or underscore. (Reserved
// words are quoted too by the server; a table named like one is refused
// by Spec.Validate's caller when it reads nothing.)
func quoteIdentIfNeeded(s string) string {
	for i, r := range s {
		lower := r >= 'a' && r <= 'z' || r == '_'
		if !(lower || i > 0 && r >= '0' && r <= '9') {
			return quoteIdent(s)
		}
	}
	return s
}
