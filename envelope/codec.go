package envelope

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// The envelope is encoded and decoded for every message of every cell, on
// the same cores as the database the benchmark measures, so its codec is
// written out for the one flat object it is rather than left to
// reflection (encoding/json spent about 10 µs per 512-byte message both
// ways, a third of the harness's cost per event in a batch baseline).
//
// AppendJSON writes exactly the bytes json.Marshal writes for an Event.
// decodeFast accepts the canonical form (what AppendJSON writes, in any
// field order, with any whitespace) and reports false for anything else:
// escapes, nulls, fractions, unknown or differently-cased keys. Unmarshal
// then decodes with encoding/json, whose behaviour, and error messages,
// stay the definition. codec_test.go holds both to that.

// AppendJSON appends e's JSON encoding to b, as json.Marshal writes it. It
// does not validate (Marshal does).
func AppendJSON(b []byte, e *Event) ([]byte, error) {
	b = append(b, `{"specversion":`...)
	b = appendString(b, e.SpecVersion)
	b = append(b, `,"source":`...)
	b = appendString(b, e.Source)
	b = append(b, `,"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, e.Type)
	b = append(b, `,"time":`...)
	b, err := appendTime(b, e.Time)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"subject":`...)
	b = appendString(b, e.Subject)
	b = append(b, `,"aggregateversion":`...)
	b = strconv.AppendInt(b, e.AggregateVersion, 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, e.Kind)
	b = append(b, `,"amount":`...)
	b = strconv.AppendInt(b, e.Amount, 10)
	for _, f := range [...]struct{ key, v string }{{`,"idempotencykey":`, e.IdempotencyKey}, {`,"tenant":`, e.Tenant}, {`,"operation":`, e.Operation}} {
		if f.v != "" {
			b = append(b, f.key...)
			b = appendString(b, f.v)
		}
	}
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	// omitempty never omits a struct: encoding/json always writes it.
	b = append(b, `,"intendedat":`...)
	if b, err = appendTime(b, e.IntendedAt); err != nil {
		return nil, err
	}
	if e.Data != "" {
		b = append(b, `,"data":`...)
		b = appendString(b, e.Data)
	}
	return append(b, '}'), nil
}

// appendTime writes t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, an error outside years 0–9999).
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

const hexDigits = "0123456789abcdef"

// plain marks the ASCII bytes encoding/json writes as they are.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendString quotes s as encoding/json does with HTML escaping on (its
// default): <, > and & as \u003c …, control characters, invalid UTF-8 as
// \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decoder reads the canonical form of an envelope.
type decoder struct {
	b    []byte
	i    int
	data bool // copy the payload into Event.Data (else only check it)
}

// decodeFast decodes b into e when b is in the canonical form; false
// means "let encoding/json decide", never "invalid".
func decodeFast(b []byte, e *Event, data bool) bool {
	d := decoder{b: b, data: data}
	if !d.byte('{') {
		return false
	}
	if d.peek() == '}' {
		d.i++
		return d.end()
	}
	for {
		key, ok := d.str()
		if !ok || !d.byte(':') || !d.field(string(key), e) {
			return false
		}
		switch d.next() {
		case ',':
			continue
		case '}':
			return d.end()
		default:
			return false
		}
	}
}

// Fields whose value is usually the same in every message (the version,
// the producer's source, the type, the kind) reuse the last value seen
// rather than allocating it again.
const (
	internSpec = iota
	internSource
	internType
	internKind
	internSlots
)

var interned [internSlots]atomic.Pointer[string]

func intern(slot int, b []byte) string {
	if p := interned[slot].Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	interned[slot].Store(&s)
	return s
}

// field decodes the value of key into e.
func (d *decoder) field(key string, e *Event) bool {
	var s *string
	slot := -1
	switch key {
	case "specversion":
		s, slot = &e.SpecVersion, internSpec
	case "source":
		s, slot = &e.Source, internSource
	case "id":
		s = &e.ID
	case "type":
		s, slot = &e.Type, internType
	case "subject":
		s = &e.Subject
	case "kind":
		s, slot = &e.Kind, internKind
	case "idempotencykey":
		s = &e.IdempotencyKey
	case "tenant":
		s = &e.Tenant
	case "operation":
		s = &e.Operation
	case "data":
		if !d.data {
			_, ok := d.str()
			return ok
		}
		s = &e.Data
	case "time":
		return d.time(&e.Time)
	case "intendedat":
		return d.time(&e.IntendedAt)
	case "aggregateversion":
		return d.int(&e.AggregateVersion)
	case "amount":
		return d.int(&e.Amount)
	case "attempt":
		var n int64
		if !d.int(&n) || int64(int(n)) != n {
			return false
		}
		e.Attempt = int(n)
		return true
	default:
		return false
	}
	v, ok := d.str()
	switch {
	case !ok:
	case slot >= 0:
		*s = intern(slot, v)
	default:
		*s = string(v)
	}
	return ok
}

func (d *decoder) skipSpace() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) peek() byte {
	d.skipSpace()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *decoder) next() byte {
	c := d.peek()
	d.i++
	return c
}

func (d *decoder) byte(c byte) bool { return d.next() == c }

// end: nothing but whitespace may follow the object.
func (d *decoder) end() bool {
	d.skipSpace()
	return d.i == len(d.b)
}

// str reads a string without escapes, of valid UTF-8 without control
// characters: what encoding/json would copy byte for byte.
func (d *decoder) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	end := bytes.IndexByte(d.b[start:], '"')
	if end < 0 {
		return nil, false
	}
	s := d.b[start : start+end]
	if !plainString(s) {
		return nil, false
	}
	d.i = start + end + 1
	return s, true
}

// plainString reports whether s is valid UTF-8 with no control character and
// no backslash: a JSON string body that needs no unescaping. ASCII, which
// is all a workload writes (the padding is most of a message), is checked
// eight bytes at a time.
func plainString(s []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(s) >= 8 {
		x := binary.LittleEndian.Uint64(s)
		bs := x ^ (ones * '\\')
		// A high bit set, a byte below 0x20, or a backslash (a zero byte
		// of bs): leave the rest to the byte loop.
		if x&highs != 0 || (x-ones*0x20)&^x&highs != 0 || (bs-ones)&^bs&highs != 0 {
			break
		}
		s = s[8:]
	}
	ascii := true
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	return ascii || utf8.Valid(s)
}

// int reads an integer without fraction or exponent.
func (d *decoder) int(n *int64) bool {
	d.skipSpace()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i-digits > 1) {
		return false
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return false
	}
	v, err := strconv.ParseInt(string(d.b[start:d.i]), 10, 64)
	*n = v
	return err == nil
}

// time reads an RFC 3339 string as time.Time.UnmarshalJSON does.
func (d *decoder) time(t *time.Time) bool {
	s, ok := d.str()
	if !ok {
		return false
	}
	return t.UnmarshalText(s) == nil
}
