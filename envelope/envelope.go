// Package envelope is the wire format of a business event: CloudEvents 1.0
// attributes in structured JSON mode, plus the extension attributes the
// inbox needs. Identity is the (source, id) pair; attempt and the transport
// ids (delivery tag, partition/offset, msgId/queue) are never part of it.
//
// Uniqueness scope and resend rules, as the article asks an envelope to
// state: id is unique within source; the producer that owns source assigns
// it once when the business event happens; every resend, retry or republish
// of that business event keeps source, id, aggregateversion and time and
// only raises attempt. A corrected business change is a new event with a
// new id.
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SpecVersion is the CloudEvents version written and accepted.
const SpecVersion = "1.0"

// Kinds of events.
const (
	Increment = "increment" // changes state relative to the previous version; never skipped
	Snapshot  = "snapshot"  // full state; newer overwrites older (keep-latest)
)

// Event is one business event.
type Event struct {
	SpecVersion string    `json:"specversion"`
	Source      string    `json:"source"`
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	Time        time.Time `json:"time"`
	Subject     string    `json:"subject"` // the aggregate id
	// AggregateVersion orders the events of one aggregate, starting at 1.
	AggregateVersion int64  `json:"aggregateversion"`
	Kind             string `json:"kind"`
	// Amount is the increment, or for a snapshot the full balance.
	Amount int64 `json:"amount"`
	// Optional request idempotency (scoped by tenant and operation).
	IdempotencyKey string `json:"idempotencykey,omitempty"`
	Tenant         string `json:"tenant,omitempty"`
	Operation      string `json:"operation,omitempty"`
	// Attempt counts publishes of this same event (0 = first); not identity.
	Attempt int `json:"attempt,omitempty"`
	// IntendedAt is when the workload intended to publish this event;
	// end-to-end latency is measured from it (no coordinated omission).
	IntendedAt time.Time `json:"intendedat,omitempty"`
	// Data is an opaque payload used to reach the workload's message size.
	Data string `json:"data,omitempty"`
}

// Key returns the identity as one string ("source id"), for maps and logs.
func (e *Event) Key() string { return e.Source + " " + e.ID }

// Validate reports the first thing wrong with e, naming the attribute.
func (e *Event) Validate() error {
	switch {
	case e.SpecVersion != SpecVersion:
		return fmt.Errorf("specversion %q: want %q", e.SpecVersion, SpecVersion)
	case e.Source == "":
		return errors.New("source is empty: identity is the (source, id) pair")
	case e.ID == "":
		return errors.New("id is empty: identity is the (source, id) pair")
	case e.Type == "":
		return errors.New("type is empty")
	case e.Subject == "":
		return errors.New("subject (the aggregate id) is empty")
	case e.AggregateVersion < 1:
		return fmt.Errorf("aggregateversion %d: versions start at 1", e.AggregateVersion)
	case e.Kind != Increment && e.Kind != Snapshot:
		return fmt.Errorf("kind %q: want %q or %q", e.Kind, Increment, Snapshot)
	case e.Attempt < 0:
		return fmt.Errorf("attempt %d is negative", e.Attempt)
	case e.IdempotencyKey != "" && (e.Tenant == "" || e.Operation == ""):
		return errors.New("idempotencykey needs tenant and operation: a key is scoped by both")
	}
	return nil
}

// Marshal encodes e as structured-mode JSON after validating it.
func Marshal(e *Event) ([]byte, error) { return MarshalAppend(make([]byte, 0, 256+len(e.Data)), e) }

// MarshalAppend is Marshal appending to b: a caller that knows the
// message's final size allocates it once.
func MarshalAppend(b []byte, e *Event) ([]byte, error) {
	if e.SpecVersion == "" {
		e.SpecVersion = SpecVersion
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	b, err := AppendJSON(b, e)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return b, nil
}

// Unmarshal decodes and validates b. Unknown attributes are rejected so a
// typo in a producer's field name surfaces as a poison message, not as a
// silently zero amount.
func Unmarshal(b []byte) (*Event, error) { return unmarshal(b, true) }

// UnmarshalSkipData is Unmarshal, accepting and refusing exactly what it
// does, but it leaves Data empty: the payload is checked and not copied.
// A consumer that never reads the payload (the inbox does not) saves what
// is most of a workload message's bytes.
func UnmarshalSkipData(b []byte) (*Event, error) { return unmarshal(b, false) }

func unmarshal(b []byte, data bool) (*Event, error) {
	var fast Event
	if decodeFast(b, &fast, data) {
		if err := fast.Validate(); err != nil {
			return nil, fmt.Errorf("envelope: %w", err)
		}
		return &fast, nil
	}
	e, err := unmarshalJSON(b)
	if e != nil && !data {
		e.Data = ""
	}
	return e, err
}

// unmarshalJSON is Unmarshal by encoding/json: the definition the fast
// path (codec.go) follows, and what decides everything it declines.
func unmarshalJSON(b []byte) (*Event, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e Event
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("envelope: malformed JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("envelope: trailing data after the JSON object")
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return &e, nil
}
