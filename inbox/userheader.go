package inbox

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
)

// fileHeader is a strategy file's header, the "-- key: value" lines before
// its first section, parsed once into typed settings.
type fileHeader struct {
	name, description string
	// outcome is OutcomeResult, OutcomeRows or OutcomeBatch: as set, or
	// inferred from the sections (checkOutcome).
	outcome string
	// transaction is TxOne (the default) or TxSplit.
	transaction     string
	broken          bool
	idempotencyKeys bool
	// external is ExternalBeforeCommit for a file with an external step.
	external string
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
	set    func(h *fileHeader, v string)
}

var trueFalse = []string{"true", "false"}

// headerSettings are the settings a header may hold, in the order
// examples/strategies/README.md lists them (a test keeps the two alike).
var headerSettings = []headerSetting{
	{key: "description", set: func(h *fileHeader, v string) { h.description = v }},
	{key: "outcome", values: []string{OutcomeResult, OutcomeRows, OutcomeBatch}, set: func(h *fileHeader, v string) { h.outcome = v }},
	{key: "transaction", values: []string{TxOne, TxSplit}, set: func(h *fileHeader, v string) { h.transaction = cmp.Or(v, TxOne) }},
	// broken: true marks a negative control, expected to FAIL.
	{key: "broken", values: trueFalse, set: func(h *fileHeader, v string) { h.broken = v == "true" }},
	// name is a display name; the registry name is always file:NAME.sql@HASH.
	{key: "name", set: func(h *fileHeader, v string) { h.name = v }},
	// Scope: what the file implements; scenarios testing something it
	// does not declare are not applicable to it.
	{key: FeatureIdempotencyKeys, values: trueFalse, set: func(h *fileHeader, v string) { h.idempotencyKeys = v == "true" }},
	// external: the file calls the external service (its @external
	// statement says with what key).
	{key: "external", values: []string{ExternalBeforeCommit}, set: func(h *fileHeader, v string) { h.external = v }},
}

var headerLine = regexp.MustCompile(`^--\s*([a-z_-]+)\s*:\s*(.*?)\s*$`)

// headerParser reads a header line by line.
type headerParser struct {
	f *parsedFile
	h fileHeader
}

func newHeaderParser(f *parsedFile) *headerParser {
	return &headerParser{f: f, h: fileHeader{transaction: TxOne, at: map[string]int{}}}
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
		return p.f.errAt(off, "header setting %q appears twice (first at line %d)", key, p.f.line(first))
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
func (h *fileHeader) errAt(f *parsedFile, key, msg string) *FileError {
	return f.errAt(h.at[key], "header %s: %s", key, msg)
}
