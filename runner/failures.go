package runner

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
)

// An event the inbox could not decide is never acked as if applied. An
// error that applying again may cure (a lock timeout, a serialization
// failure, a lost connection) sends the delivery back, within a bound; one
// that will come back the same way (a syntax error, division by zero, an
// overflow, an invalid event) — or a retryable one past the bound — sends
// it to the broker's dead-letter destination, exactly as a poison payload,
// and the cell ends with the verdict ERROR naming the first failure of
// each kind.

// RetryBound is how long a delivery whose event keeps failing with
// retryable errors is sent back before it is dead-lettered: after
// Attempts handler calls for it, or For after its first failure, whichever
// comes first. The inbox already retries each call a few times (with
// backoff) before it reports a failure.
type RetryBound struct {
	Attempts int
	For      time.Duration
}

// DefaultRetryBound gives a transient fault (a restart, a failover) time to
// pass and ends a failure that does not.
var DefaultRetryBound = RetryBound{Attempts: 5, For: 2 * time.Minute}

func (b RetryBound) withDefaults() RetryBound {
	if b.Attempts <= 0 {
		b.Attempts = DefaultRetryBound.Attempts
	}
	if b.For <= 0 {
		b.For = DefaultRetryBound.For
	}
	return b
}

// ErrorPolicy decides the verdict of a delivery whose event failed, and
// remembers the failures: each message's attempts, and the first failure
// of each kind with how often it happened. Safe for concurrent use.
type ErrorPolicy struct {
	bound   RetryBound
	pending atomic.Int64 // len(tries), read without the lock on success
	mu      sync.Mutex
	tries   map[string]*tries // by message id
	kinds   map[string]*results.Failure
	// deadAt is each aggregate's lowest dead-lettered version.
	deadAt map[string]int64
}

type tries struct {
	n     int
	first time.Time
}

// NewErrorPolicy returns a policy with bound (zero fields: the defaults).
func NewErrorPolicy(bound RetryBound) *ErrorPolicy {
	return &ErrorPolicy{bound: bound.withDefaults(), tries: map[string]*tries{}, kinds: map[string]*results.Failure{}, deadAt: map[string]int64{}}
}

// Verdict is Retry for a retryable failure within the bound, else Reject
// (dead-letter). A failure while the consumer is stopping is a Retry: the
// next consumer decides. An event whose aggregate already had an earlier
// version dead-lettered is dead-lettered at once: it can never apply.
func (p *ErrorPolicy) Verdict(ctx context.Context, id string, ev *envelope.Event, f inbox.Failure) brokers.Verdict {
	if ctx.Err() != nil {
		return brokers.Retry
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.deadAt[ev.Subject]; ok && v < ev.AggregateVersion && f.Retryable {
		f = inbox.Failure{Kind: kindPredecessor, Message: fmt.Sprintf("version %d of %s was dead-lettered: a later version can never apply", v, ev.Subject)}
	}
	t := p.tries[id]
	if t == nil {
		t = &tries{first: time.Now()}
		p.tries[id] = t
		p.pending.Add(1)
	}
	t.n++
	v := brokers.Retry
	if !f.Retryable || t.n >= p.bound.Attempts || (t.n > 1 && time.Since(t.first) >= p.bound.For) {
		v = brokers.Reject
		delete(p.tries, id)
		p.pending.Add(-1)
		if d, ok := p.deadAt[ev.Subject]; !ok || ev.AggregateVersion < d {
			p.deadAt[ev.Subject] = ev.AggregateVersion
		}
	}
	k := p.kinds[f.Kind]
	if k == nil {
		k = &results.Failure{Kind: f.Kind, SQLState: f.SQLState, Message: f.Message, Where: f.Where, Event: ev.ID, Retryable: f.Retryable}
		p.kinds[f.Kind] = k
	}
	k.Count++
	if v == brokers.Reject {
		k.DeadLettered++
	}
	return v
}

// Succeeded forgets a message's earlier failures.
func (p *ErrorPolicy) Succeeded(id string) {
	if p.pending.Load() == 0 {
		return // the common case costs the hot path no lock
	}
	p.mu.Lock()
	if _, ok := p.tries[id]; ok {
		delete(p.tries, id)
		p.pending.Add(-1)
	}
	p.mu.Unlock()
}

// Failures lists the first failure of each kind, most frequent first.
func (p *ErrorPolicy) Failures() []results.Failure {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]results.Failure, 0, len(p.kinds))
	for _, k := range p.kinds {
		out = append(out, *k)
	}
	sortFailures(out)
	return out
}

// kindPredecessor is a consequence, not a cause: listed after the causes.
const kindPredecessor = "predecessor_dead_lettered"

// sortFailures puts causes before consequences, then the most frequent
// first.
func sortFailures(fs []results.Failure) {
	sort.Slice(fs, func(i, j int) bool {
		if ci, cj := fs[i].Kind == kindPredecessor, fs[j].Kind == kindPredecessor; ci != cj {
			return cj
		}
		if fs[i].Count != fs[j].Count {
			return fs[i].Count > fs[j].Count
		}
		return fs[i].Kind < fs[j].Kind
	})
}

// mergeFailures adds b's counts to a, keeping a's first example of a kind.
func mergeFailures(a, b []results.Failure) []results.Failure {
	idx := map[string]int{}
	for i, f := range a {
		idx[f.Kind] = i
	}
	for _, f := range b {
		if i, ok := idx[f.Kind]; ok {
			a[i].Count += f.Count
			a[i].DeadLettered += f.DeadLettered
			continue
		}
		idx[f.Kind] = len(a)
		a = append(a, f)
	}
	sortFailures(a)
	return a
}

// failureError is the cell's error when deliveries were dead-lettered
// after failures: the verdict is then ERROR, whatever the checker found.
func failureError(fs []results.Failure) error {
	var dead int64
	for _, f := range fs {
		dead += f.DeadLettered
	}
	if dead == 0 {
		return nil
	}
	f := fs[0]
	for _, g := range fs {
		if g.DeadLettered > 0 {
			f = g
			break
		}
	}
	return fmt.Errorf("%d deliveries dead-lettered because applying their event failed; first: %s, applying %s", dead, describeFailure(f), f.Event)
}

func describeFailure(f results.Failure) string {
	return inbox.Failure{Kind: f.Kind, SQLState: f.SQLState, Message: f.Message, Where: f.Where}.String()
}
