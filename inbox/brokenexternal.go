package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/external"
)

// Negative controls of the external strategies (external.go): each is a
// correct pattern with one mistake from the article, for the checker's
// external rules to catch. Unlike the database-only controls they retry
// as their correct twins do: the mistakes are in how they retry.
// broken-ext-new-key and broken-ext-exists are ext-key and ext-lease with
// their mistake switched on (extKey.newKeyEachAttempt,
// extLease.existsMeansDone); broken-ext-after-commit is its own path.

// newRequestID is broken-ext-new-key's fresh request id.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// brokenExtAfterCommit commits the inbox row and the change first, then
// calls without a key, retrying a few times: a call that timed out after
// it was applied is paid again (external-duplicate), and one the service
// refused for longer than the retries is never paid, since the
// redelivery is a DUPLICATE (external-lost).
type brokenExtAfterCommit struct{ about }

// afterCommitTries is how often broken-ext-after-commit calls.
const afterCommitTries = 3

// ApplyBatch implements Strategy: the call comes after the commit.
func (s brokenExtAfterCommit) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		o := a.applyOne(ctx, ev, applyOpts{hook: true})
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
