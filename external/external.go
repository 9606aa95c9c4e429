// Package external is the service beyond the database that the suite
// controls: a stand-in for a payment provider, served over HTTP on
// loopback, so that strategies whose handler calls another system can be
// judged exactly once on that side too. The article the suite is built on
// spends a section on such effects: a payment cannot commit in the inbox
// transaction, so the handler relies on the provider's idempotency key and
// its result query by key. This service offers both, the way providers
// such as Stripe do:
//
//   - a payment request carries an idempotency key (or none); the first
//     request with a key is applied and its result stored; a repeat with
//     the same key and the same request gets the stored result (and
//     applies nothing); the same key with a different request is refused
//     (409): a key names one request, never two;
//   - a request without a key is applied every time: the service cannot
//     tell a retry from a new payment;
//   - the result of a key can be queried (found, or never applied);
//   - every call is recorded in a call log, which the checker reads after
//     a cell (runner.Judge): exactly one applied request per event that
//     should have produced one.
//
// Each cell works in a namespace of its own, so one service serves a
// whole run, and the processes of a run (bench run, bench worker) share
// it. The fault knobs are the service's side of the workload's fault
// plan: a per-call delay, an answer held until the caller gave up (the
// call timed out after the service applied it), and a window in which
// every call is refused (the service unavailable for a while).
//
// The package depends on nothing else of the project but the leaf
// internal/ctxtime (its delays end with the caller's request): the inbox's
// strategies call it through API, the runner starts it (Start) or reaches
// one started with `bench external serve` (Serve).
package external

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"
)

// Request is one payment request.
type Request struct {
	// Key is the idempotency key; "" sends the request without one.
	Key string `json:"-"`
	// Reference is the merchant's reference for the payment (the event it
	// pays for, "source id"): part of the request's content, and what the
	// checker joins the call log on.
	Reference string `json:"reference"`
	Account   string `json:"account"`
	Amount    int64  `json:"amount"`
	// IntendedAt is harness metadata, never sent: when the event the
	// request is made for was meant to be published, so that a caller can
	// measure the time until the external side answered.
	IntendedAt time.Time `json:"-"`
}

// Fingerprint is what a key is bound to: the request's content. A repeat
// with the key must carry the same fingerprint.
func (r Request) Fingerprint() string {
	h := sha256.New()
	for _, f := range []string{r.Reference, r.Account, strconv.FormatInt(r.Amount, 10)} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Payment is the stored result of an applied request.
type Payment struct {
	ID        string    `json:"id"`
	Key       string    `json:"key,omitempty"`
	Reference string    `json:"reference"`
	Account   string    `json:"account"`
	Amount    int64     `json:"amount"`
	CreatedAt time.Time `json:"created_at"`
	// Replayed is set on the answer to a repeat of a key: the stored
	// result, nothing applied.
	Replayed bool `json:"replayed,omitempty"`
}

// Call outcomes in the log.
const (
	Applied  = "applied"  // a new payment: the external effect
	Replayed = "replayed" // a repeat of a key with the same request: the stored result
	Conflict = "conflict" // a key reused with a different request: refused
	Refused  = "refused"  // the service was unavailable: nothing applied
	Found    = "found"    // a result query found the key's payment
	Missing  = "missing"  // a result query found nothing: never applied
)

// Call operations in the log.
const (
	OpPay   = "pay"
	OpQuery = "query"
)

// FaultTimeout asks the service to apply a request and then hold its
// answer until the caller gives up: the call times out after the service
// applied it. It fires once per reference, whichever process asks.
const FaultTimeout = "timeout"

// Call is one entry of the call log.
type Call struct {
	Seq       int64     `json:"seq"`
	At        time.Time `json:"at"`
	Op        string    `json:"op"`
	Key       string    `json:"key,omitempty"`
	Reference string    `json:"reference,omitempty"`
	Account   string    `json:"account,omitempty"`
	Amount    int64     `json:"amount,omitempty"`
	// Fingerprint is the request's (Request.Fingerprint), for a payment.
	Fingerprint string `json:"fingerprint,omitempty"`
	Outcome     string `json:"outcome"`
	// Payment is the id applied, replayed or found.
	Payment string `json:"payment,omitempty"`
	// Fault is FaultTimeout when the answer was held until the caller
	// gave up.
	Fault string `json:"fault,omitempty"`
}

// Log is a namespace's call log, in the order the service took the calls.
type Log struct {
	Calls []Call `json:"calls"`
}

// Tally counts a log's calls by outcome.
type Tally struct {
	Calls, Effects, Replays, Conflicts, Refused, Queries, TimedOut int64
}

// Tally counts the log.
func (l *Log) Tally() Tally {
	var t Tally
	for _, c := range l.Calls {
		if c.Op == OpQuery {
			t.Queries++
			continue
		}
		t.Calls++
		switch c.Outcome {
		case Applied:
			t.Effects++
		case Replayed:
			t.Replays++
		case Conflict:
			t.Conflicts++
		case Refused:
			t.Refused++
		}
		if c.Fault == FaultTimeout {
			t.TimedOut++
		}
	}
	return t
}

// Config is a namespace's behaviour.
type Config struct {
	// Delay is the service's time per call (payment or query), spent
	// before it answers: what a slow provider costs its callers.
	Delay time.Duration `json:"delay"`
}

// Errors of a call, as a caller must treat them.
var (
	// ErrUnknownOutcome: the call was sent and no answer came (a timeout,
	// a connection lost): the request may have been applied. A retry
	// must carry the same key, or ask for the key's result first.
	ErrUnknownOutcome = errors.New("external call: no answer, outcome unknown")
	// ErrRefused: the service refused the call without applying it
	// (unavailable): it may be sent again.
	ErrRefused = errors.New("external call refused: service unavailable")
	// ErrKeyConflict: the key was used before with a different request;
	// nothing was applied, and sending it again will not help.
	ErrKeyConflict = errors.New("external call refused: idempotency key reused with a different request")
)

// Retryable reports whether sending the same request again may succeed:
// it was refused, or its outcome is unknown (then only with the same key).
func Retryable(err error) bool {
	return errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrRefused)
}
