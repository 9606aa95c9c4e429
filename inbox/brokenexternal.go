package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/external"
)

// Negative controls of the external strategies (external.go): each is a
// correct pattern with one mistake from the article, for the checker's
// external rules to catch. Unlike the database-only controls they retry
// as their correct twins do: the mistakes are in how they retry.

// brokenExtNewKey is ext-key whose every attempt sends a fresh request
// id: a call that timed out after the service applied it, or a handler
// that died before its commit, is paid twice (external-duplicate).
type brokenExtNewKey struct{}

func (brokenExtNewKey) Name() string { return "broken-ext-new-key" }
func (brokenExtNewKey) Description() string {
	return "ext-key retrying under a new request id each attempt: a call that timed out after it was applied, or a handler that died before its commit, is paid again (external-duplicate)"
}
func (brokenExtNewKey) Broken() bool { return true }
func (brokenExtNewKey) ExternalStep() string {
	return "in the transaction, before the commit, a new key per attempt"
}
func (brokenExtNewKey) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.applyThen(ctx, "broken-ext-new-key", consumer, ev, func(ctx context.Context, tx pgx.Tx, _ int) error {
			// The mistake: "a new request deserves a new id".
			if _, err := in.pay(ctx, ExternalRequest(ExternalKey(consumer, ev)+"#"+newRequestID(), ev)); err != nil {
				return err
			}
			return in.afterCall(ctx, consumer, ev)
		})
	})
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// brokenExtExists is ext-lease reading "the row exists" as "it
// succeeded": a delivery that finds a PROCESSING operation (its holder
// died, or its call failed) acks it as a DUPLICATE. The operation stays
// PROCESSING for ever and the change never applies (processing-stuck).
type brokenExtExists struct{}

func (brokenExtExists) Name() string { return "broken-ext-exists" }
func (brokenExtExists) Description() string {
	return "ext-lease taking an existing operation row for success: a PROCESSING operation whose holder died or failed is acked as DUPLICATE and never finished (processing-stuck)"
}
func (brokenExtExists) Broken() bool { return true }
func (brokenExtExists) ExternalStep() string {
	return "between two transactions, under a lease, key = event identity"
}
func (brokenExtExists) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.applyLeased(ctx, "broken-ext-exists", consumer, ev, true)
	})
}

// brokenExtAfterCommit commits the inbox row and the change first, then
// calls without a key, retrying a few times: a call that timed out after
// it was applied is paid again (external-duplicate), and one the service
// refused for longer than the retries is never paid, since the
// redelivery is a DUPLICATE (external-lost).
type brokenExtAfterCommit struct{}

// afterCommitTries is how often broken-ext-after-commit calls.
const afterCommitTries = 3

func (brokenExtAfterCommit) Name() string { return "broken-ext-after-commit" }
func (brokenExtAfterCommit) Description() string {
	return "commits, then calls without an idempotency key and retries a few times: a timed-out call is paid twice (external-duplicate), one refused for longer is never paid (external-lost)"
}
func (brokenExtAfterCommit) Broken() bool         { return true }
func (brokenExtAfterCommit) ExternalStep() string { return "after the commit, without a key" }
func (brokenExtAfterCommit) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		o := in.applyOne(ctx, "broken-ext-after-commit", consumer, ev, applyOpts{hook: true})
		if o.Result != Applied || ev.Kind == envelope.Snapshot {
			return o
		}
		start := time.Now().Add(-o.Duration)
		for try := range afterCommitTries {
			_, err := in.pay(ctx, ExternalRequest("", ev))
			if err == nil || !external.Retryable(err) {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond << try):
			}
		}
		// The database says done: what became of the call is nobody's
		// concern any more.
		o.Duration = time.Since(start)
		return o
	})
}
