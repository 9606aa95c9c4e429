package strategyfile

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
)

// Header is a strategy file's header, the "-- key: value" lines before
// its first section, parsed once into typed settings.
type Header struct {
	// Name is a display name; the registry name is always
	// file:NAME.sql@HASH.
	Name        string
	Description string
	// Outcome is OutcomeResult, OutcomeRows or OutcomeBatch: as set, or
	// inferred from the sections (checkOutcome).
	Outcome string
	// Transaction is TxOne (the default) or TxSplit.
	Transaction string
	// Broken marks a negative control, expected to FAIL.
	Broken bool
	// IdempotencyKeys declares that the file handles client idempotency
	// keys (the header "idempotency-keys: true").
	IdempotencyKeys bool
	// External is ExternalBeforeCommit for a file with an external step.
	External string
	// at is the byte offset of each setting's line, by key: errors found
	// later point at it.
	at map[string]int
}

// headerSetting is one setting a header may hold.
type headerSetting struct {
	key string
	// values are the accepted values, nil for free text. An empty value is
	// always accepted: it means the default.
	values []string
	set    func(h *Header, v string)
}

var trueFalse = []string{"true", "false"}

// headerSettings are the settings a header may hold, in the order
// examples/strategies/README.md lists them (a test keeps the two alike).
var headerSettings = []headerSetting{
	{key: "description", set: func(h *Header, v string) { h.Description = v }},
	{key: "outcome", values: []string{OutcomeResult, OutcomeRows, OutcomeBatch}, set: func(h *Header, v string) { h.Outcome = v }},
	{key: "transaction", values: []string{TxOne, TxSplit}, set: func(h *Header, v string) { h.Transaction = cmp.Or(v, TxOne) }},
	{key: "broken", values: trueFalse, set: func(h *Header, v string) { h.Broken = v == "true" }},
	{key: "name", set: func(h *Header, v string) { h.Name = v }},
	// Scope: what the file implements; scenarios testing something it
	// does not declare are not applicable to it (inbox.Scoped).
	{key: "idempotency-keys", values: trueFalse, set: func(h *Header, v string) { h.IdempotencyKeys = v == "true" }},
	// external: the file calls the external service (its @external
	// statement says with what key).
	{key: "external", values: []string{ExternalBeforeCommit}, set: func(h *Header, v string) { h.External = v }},
}

var headerLine = regexp.MustCompile(`^--\s*([a-z_-]+)\s*:\s*(.*?)\s*$`)

// headerParser reads a header line by line.
type headerParser struct {
	f *File
	h Header
}

func newHeaderParser(f *File) *headerParser {
	return &headerParser{f: f, h: Header{Transaction: TxOne, at: map[string]int{}}}
}

// line reads one header line, trimmed, at byte offset off: a setting, or a
// free comment (a comment that does not start with "word:").
func (p *headerParser) line(t string, off int) error {
	m := headerLine.FindStringSubmatch(t)
	if m == nil {
		return nil
	}
	key, val := m[1], m[2]
	i := slices.IndexFunc(headerSettings, func(s headerSetting) bool { return s.key == key })
	if i < 0 {
		// A typo must not silently change what the file means.
		keys := make([]string, len(headerSettings))
		for i, s := range headerSettings {
			keys[i] = s.key
		}
		return p.f.errAt(off, "unknown header setting %q: settings are %s (write free comments without 'word:' at the start)", key, strings.Join(keys, ", "))
	}
	if first, dup := p.h.at[key]; dup {
		return p.f.errAt(off, "header setting %q appears twice (first at line %d)", key, p.f.Line(first))
	}
	s := headerSettings[i]
	if val != "" && s.values != nil && !slices.Contains(s.values, val) {
		return p.f.errAt(off, "header %s: %q: want %s", key, val, orList(s.values, "or"))
	}
	p.h.at[key] = off
	s.set(&p.h, val)
	return nil
}

// errAt is an error about the setting key, at its line.
func (h *Header) errAt(f *File, key, msg string) *Error {
	return f.errAt(h.at[key], "header %s: %s", key, msg)
}
