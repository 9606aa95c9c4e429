package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/external"
)

// Effects beyond the database. A payment made by another system cannot
// commit in the inbox transaction; what the article advises instead, each
// a strategy here, calling the external service (Options.External, a
// payment-provider stand-in: package external):
//
//   - ext-key: the idempotency key is the event's identity. Claim and
//     change run as in tx; before the commit the service is called with
//     the key, and the inbox row and the change commit only after it
//     answered. A redelivery (the call timed out, the handler died before
//     the commit) calls again with the same key and gets the stored
//     result. The transaction, and the account's row lock, are held while
//     the service works.
//   - ext-lease: a durable operation state with a lease (external_op):
//     claim the operation PROCESSING with a lease and commit; call with
//     the key outside any transaction; then record DONE, the inbox row and
//     the change in one transaction. A delivery that finds a PROCESSING
//     operation whose lease expired takes it over and first queries the
//     result by key (never calling blind under a new key); after
//     Options.LeaseTakeovers takeovers the operation is STUCK and the
//     event is reported, not retried forever. "Exists" no longer means
//     "succeeded": only DONE does.
//   - ext-outbox: the request is written to an outbox in the inbox
//     transaction; a relay (Relaying) sends it with its key, at least
//     once, and the service deduplicates.
//
// Only increments call (a payment of their amount); snapshots carry state,
// not an action, and take the database-only path. None of them parks: a
// version-ahead event is a GAP, redelivered once its predecessor applied.
// The negative controls beside them (broken-ext-*) each keep one mistake:
// a retry under a new request id, "exists means succeeded" with a
// PROCESSING state, a call after the commit without a key.

// Externals is implemented by strategies whose effect includes a call to
// the external service. A runner gives them Options.External and judges
// the service's call log beside the database.
type Externals interface {
	// ExternalStep says in a few words when the call happens.
	ExternalStep() string
}

// CallsExternal reports whether s calls the external service.
func CallsExternal(s Strategy) bool {
	e, ok := s.(Externals)
	return ok && e.ExternalStep() != ""
}

// Relaying is implemented by strategies whose requests a relay sends
// after the commit (ext-outbox). A runner keeps RunRelay going beside the
// consumers and calls FlushRelay before the cell is judged.
type Relaying interface {
	// RunRelay sends pending requests with workers concurrent relays
	// until ctx ends.
	RunRelay(ctx context.Context, in *Inbox, workers int)
	// FlushRelay sends until nothing is pending, or ctx ends.
	FlushRelay(ctx context.Context, in *Inbox) error
}

// ExternalKey is the idempotency key of the correct strategies: the
// processing responsibility and the event's identity, never the attempt.
func ExternalKey(consumer string, ev *envelope.Event) string {
	return consumer + "/" + ev.Source + "/" + ev.ID
}

// ExternalRequest is the payment an event asks for, under key.
func ExternalRequest(key string, ev *envelope.Event) external.Request {
	return external.Request{Key: key, Reference: ev.Key(), Account: ev.Subject, Amount: ev.Amount, IntendedAt: ev.IntendedAt}
}

// Errors of the external strategies.
var (
	// ErrNoExternal: a strategy needs Options.External and has none.
	ErrNoExternal = errors.New("no external service configured (Options.External)")
	// ErrInProgress: another delivery holds the operation's lease.
	ErrInProgress = errors.New("external operation in progress: another delivery holds its lease")
	// ErrStuck: the operation was taken over too often; it waits for a
	// person (or a reconciliation job) and is never retried by itself.
	ErrStuck = errors.New("external operation stuck")
)

// pay calls the service. Its errors are retryable when sending again may
// help (classify).
func (in *Inbox) pay(ctx context.Context, req external.Request) (external.Payment, error) {
	if in.opt.External == nil {
		return external.Payment{}, ErrNoExternal
	}
	return in.opt.External.Pay(ctx, req)
}

func (in *Inbox) lookup(ctx context.Context, key string) (external.Payment, bool, error) {
	if in.opt.External == nil {
		return external.Payment{}, false, ErrNoExternal
	}
	return in.opt.External.Lookup(ctx, key)
}

// afterCall runs Options.AfterCall.
func (in *Inbox) afterCall(ctx context.Context, consumer string, ev *envelope.Event) error {
	if in.opt.AfterCall == nil {
		return nil
	}
	return in.opt.AfterCall(ctx, consumer, ev)
}

// external fills the statements of the external strategies.
func (t *sqlText) external(s func(string) string) {
	t.opClaim = s(`INSERT INTO {S}.external_op (consumer, source, event_id, aggregate_id, aggregate_version, request_key, state, lease_until)
		VALUES ($1, $2, $3, $4, $5, $6, 'PROCESSING', clock_timestamp() + $7::bigint * interval '1 microsecond') ON CONFLICT DO NOTHING`)
	t.opRead = s(`SELECT state, lease_until <= clock_timestamp(), attempts, request_key FROM {S}.external_op
		WHERE consumer = $1 AND source = $2 AND event_id = $3 FOR UPDATE`)
	t.opTakeOver = s(`UPDATE {S}.external_op SET lease_until = clock_timestamp() + $4::bigint * interval '1 microsecond',
			attempts = attempts + 1, updated_at = now()
		WHERE consumer = $1 AND source = $2 AND event_id = $3`)
	t.opStuck = s(`UPDATE {S}.external_op SET state = 'STUCK', updated_at = now() WHERE consumer = $1 AND source = $2 AND event_id = $3`)
	t.opRelease = s(`UPDATE {S}.external_op SET lease_until = clock_timestamp(), updated_at = now()
		WHERE consumer = $1 AND source = $2 AND event_id = $3 AND state = 'PROCESSING'`)
	t.opDone = s(`UPDATE {S}.external_op SET state = 'DONE', payment = $4, updated_at = now()
		WHERE consumer = $1 AND source = $2 AND event_id = $3 AND state = 'PROCESSING'`)
	t.outboxInsert = s(`INSERT INTO {S}.outbox (consumer, source, event_id, request_key, account, amount, intended_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`)
	t.outboxClaim = s(`SELECT id, consumer, source, event_id, request_key, account, amount, intended_at FROM {S}.outbox
		WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`)
	t.outboxSent = s(`UPDATE {S}.outbox o SET sent_at = clock_timestamp(), attempts = o.attempts + 1, payment = t.p
		FROM unnest($1::bigint[], $2::text[]) AS t(id, p) WHERE o.id = t.id`)
	t.outboxPending = s(`SELECT count(*) FROM {S}.outbox WHERE sent_at IS NULL`)
}

// extKey is the idempotency-key pattern. With newKeyEachAttempt it is
// broken-ext-new-key: every attempt sends a fresh request id, so a call
// that timed out after the service applied it, or a handler that died
// before its commit, is paid twice (external-duplicate).
type extKey struct {
	about
	newKeyEachAttempt bool
}

// ApplyBatch implements Strategy: the call runs in the event's
// transaction once the change applied, before the commit.
func (s extKey) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.applyOne(ctx, ev, applyOpts{hook: true, then: func(ctx context.Context, tx pgx.Tx) error {
			key := ExternalKey(consumer, ev)
			if s.newKeyEachAttempt {
				// The mistake: "a new request deserves a new id".
				key += "#" + newRequestID()
			}
			if _, err := in.pay(ctx, ExternalRequest(key, ev)); err != nil {
				return err
			}
			return in.afterCall(ctx, consumer, ev)
		}})
	})
}

// extLease is the durable-state pattern. With existsMeansDone it is
// broken-ext-exists, reading "the row exists" as "it succeeded": a
// delivery that finds a PROCESSING operation (its holder died, or its
// call failed) acks it as a DUPLICATE. The operation stays PROCESSING for
// ever and the change never applies (processing-stuck).
type extLease struct {
	about
	existsMeansDone bool
}

// ApplyBatch implements Strategy.
func (s extLease) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.applyLeased(ctx, ev, s.existsMeansDone)
	})
}

// applyLeased runs the lease protocol for one event, retrying retryable
// failures (a refused or unanswered call, a lease held by another
// delivery) from the start: each retry finds the operation where the last
// one left it. existsMeansDone is broken-ext-exists's mistake.
func (a applier) applyLeased(ctx context.Context, ev *envelope.Event, existsMeansDone bool) Outcome {
	if err := validate(a.consumer, ev); err != nil || ev.Kind == envelope.Snapshot {
		return a.applyOne(ctx, ev, applyOpts{hook: true})
	}
	return a.retried(ctx, ev, func(ctx context.Context) (Outcome, error) {
		return a.leased(ctx, ev, existsMeansDone)
	})
}

// leaseMode is what a delivery does once it holds the lease.
type leaseMode int

const (
	leaseCall    leaseMode = iota + 1 // a new operation: call
	leaseRecover                      // taken over: query the key's result first
)

// leased is one attempt of the lease protocol.
func (a applier) leased(ctx context.Context, ev *envelope.Event, existsMeansDone bool) (Outcome, error) {
	key := ExternalKey(a.consumer, ev)
	lease := a.opt.Lease.Microseconds()
	var mode leaseMode
	stuck := false
	o, err := a.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
		o := newOutcome(ev)
		tag, err := tx.Exec(ctx, a.sql.opClaim, a.consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, key, lease)
		if err != nil {
			return o, false, fmt.Errorf("claim external operation: %w", err)
		}
		if tag.RowsAffected() == 0 {
			if existsMeansDone {
				// The mistake: the row exists, so it "succeeded".
				o.Result = Duplicate
				return o, false, nil
			}
			var state string
			var expired bool
			var takeovers int
			if err := tx.QueryRow(ctx, a.sql.opRead, a.consumer, ev.Source, ev.ID).Scan(&state, &expired, &takeovers, &key); err != nil {
				return o, false, fmt.Errorf("read external operation: %w", err)
			}
			switch {
			case state == "DONE":
				o.Result = Duplicate
				return o, false, nil
			case state == "STUCK":
				return o, false, fmt.Errorf("%w: marked STUCK earlier", ErrStuck)
			case !expired:
				return o, false, &retryableError{ErrInProgress}
			case takeovers >= a.opt.LeaseTakeovers:
				if _, err := tx.Exec(ctx, a.sql.opStuck, a.consumer, ev.Source, ev.ID); err != nil {
					return o, false, fmt.Errorf("mark external operation stuck: %w", err)
				}
				stuck = true
				return o, true, nil
			}
			if _, err := tx.Exec(ctx, a.sql.opTakeOver, a.consumer, ev.Source, ev.ID, lease); err != nil {
				return o, false, fmt.Errorf("take over external operation: %w", err)
			}
			mode = leaseRecover
			return o, true, nil
		}
		// A new operation: the version decides before anything is called.
		// Nothing but a newer snapshot can change the version meanwhile:
		// the next increment waits for this one's version.
		cur, err := a.lockVersion(ctx, tx, ev.Subject)
		if err != nil {
			return o, false, err
		}
		switch v := ev.AggregateVersion; {
		case v <= cur:
			o.Result = Stale
			return o, false, nil
		case v > cur+1:
			o.Result = Gap
			return o, false, nil
		}
		mode = leaseCall
		return o, true, nil
	})
	switch {
	case err != nil || o.Result != NoResult:
		return o, err
	case stuck:
		return o, fmt.Errorf("%w after %d takeovers of its lease: reported, not retried", ErrStuck, a.opt.LeaseTakeovers)
	}
	// Outside any transaction: no lock is held while the service works.
	var p external.Payment
	found := false
	if mode == leaseRecover {
		// The previous holder may have been answered, or not: ask.
		p, found, err = a.lookup(ctx, key)
		if err != nil {
			return o, a.releaseLease(ctx, ev, err)
		}
	}
	if !found {
		if p, err = a.pay(ctx, ExternalRequest(key, ev)); err != nil {
			return o, a.releaseLease(ctx, ev, err)
		}
	}
	if err := a.afterCall(ctx, a.consumer, ev); err != nil {
		return o, err // died: the lease expires
	}
	return a.recordLeased(ctx, ev, p.ID)
}

// releaseLease ends the lease after a failed call, so that the next
// attempt takes the operation over at once (it queries the key's result
// first: a call without an answer may have been applied). If the release
// fails too, the lease expires.
func (a applier) releaseLease(ctx context.Context, ev *envelope.Event, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = a.pool.Exec(rctx, a.sql.opRelease, a.consumer, ev.Source, ev.ID)
	return cause
}

// recordLeased records the call's result, the inbox row and the change in
// one transaction. An operation that is no longer PROCESSING was finished
// by a delivery that took it over: this one is a DUPLICATE. A change that
// no longer applies (a newer snapshot overtook the increment while it
// called) leaves the operation DONE and nothing else.
func (a applier) recordLeased(ctx context.Context, ev *envelope.Event, payment string) (Outcome, error) {
	var done bool
	o, err := a.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
		o := newOutcome(ev)
		tag, err := tx.Exec(ctx, a.sql.opDone, a.consumer, ev.Source, ev.ID, payment)
		if err != nil {
			return o, false, fmt.Errorf("record external operation done: %w", err)
		}
		if tag.RowsAffected() == 0 {
			o.Result = Duplicate
			return o, false, nil
		}
		o, commit, err := a.applyInTx(ctx, tx, ev, applyOpts{hook: true})
		done = err == nil && o.Result == Stale
		return o, commit, err
	})
	if err == nil && done {
		if _, err := a.pool.Exec(ctx, a.sql.opDone, a.consumer, ev.Source, ev.ID, payment); err != nil {
			return o, fmt.Errorf("record external operation done (%s): %w", o.Result, err)
		}
	}
	return o, err
}

// extOutbox is the transactional-outbox pattern.
type extOutbox struct{ about }

// ApplyBatch implements Strategy: the request is written in the event's
// transaction once the change applied.
func (s extOutbox) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.applyOne(ctx, ev, applyOpts{hook: true, then: func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, in.sql.outboxInsert, consumer, ev.Source, ev.ID, ExternalKey(consumer, ev), ev.Subject, ev.Amount, nullTime(ev.IntendedAt)); err != nil {
				return fmt.Errorf("write outbox: %w", err)
			}
			return nil
		}})
	})
}

// relayBatch is how many outbox rows one relay claims and sends at once.
const relayBatch = 64

// RunRelay implements Relaying with Inbox.RunRelay.
func (extOutbox) RunRelay(ctx context.Context, in *Inbox, workers int) { in.RunRelay(ctx, workers) }

// FlushRelay implements Relaying with Inbox.FlushRelay.
func (extOutbox) FlushRelay(ctx context.Context, in *Inbox) error { return in.FlushRelay(ctx) }

// RunRelay sends the schema's pending outbox rows with workers concurrent
// relays until ctx ends; each claims rows with SKIP LOCKED, so relays (in
// any process) never send the same row at the same time.
func (in *Inbox) RunRelay(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pause := time.Millisecond
			for ctx.Err() == nil {
				n, err := in.relayOnce(ctx)
				switch {
				case err != nil:
					pause = min(max(2*pause, 10*time.Millisecond), 500*time.Millisecond)
				case n == 0:
					pause = min(2*pause+time.Millisecond, 20*time.Millisecond)
				default:
					pause = 0
				}
				if pause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(pause):
					}
				}
			}
		}()
	}
	wg.Wait()
}

// FlushRelay sends until no outbox row is pending, or ctx ends (with the
// error that kept rows pending).
func (in *Inbox) FlushRelay(ctx context.Context) error {
	var last error
	for pause := time.Duration(0); ; {
		var pending int64
		if err := in.pool.QueryRow(ctx, in.sql.outboxPending).Scan(&pending); err != nil {
			return errors.Join(fmt.Errorf("count pending outbox rows: %w", err), last)
		}
		if pending == 0 {
			return nil
		}
		if _, err := in.relayOnce(ctx); err != nil {
			last = err
			pause = min(max(2*pause, 10*time.Millisecond), 500*time.Millisecond)
		} else {
			pause = 0
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d outbox rows still pending: %w", pending, errors.Join(ctx.Err(), last))
		case <-time.After(pause):
		}
	}
}

// outboxRow is a claimed row and the outcome of its call.
type outboxRow struct {
	id       int64
	consumer string
	ev       envelope.Event
	key      string
	payment  string
	err      error
}

// relayOnce claims up to relayBatch pending rows, sends them concurrently
// and marks those answered sent, in one transaction: a relay that dies
// before its commit leaves them pending, and they are sent again with
// the same keys. It returns how many it marked sent, and the first
// failure.
func (in *Inbox) relayOnce(ctx context.Context) (int, error) {
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("relay: begin: %w", err)
	}
	rows, err := tx.Query(ctx, in.sql.outboxClaim, relayBatch)
	if err != nil {
		return 0, rollback(ctx, tx, fmt.Errorf("relay: claim: %w", err))
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*outboxRow, error) {
		o := &outboxRow{}
		var at *time.Time
		err := r.Scan(&o.id, &o.consumer, &o.ev.Source, &o.ev.ID, &o.key, &o.ev.Subject, &o.ev.Amount, &at)
		if at != nil {
			o.ev.IntendedAt = *at
		}
		return o, err
	})
	if err != nil || len(batch) == 0 {
		return 0, rollback(ctx, tx, err)
	}
	var wg sync.WaitGroup
	for _, o := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p external.Payment
			if p, o.err = in.pay(ctx, ExternalRequest(o.key, &o.ev)); o.err == nil {
				o.payment = p.ID
				o.err = in.afterCall(ctx, o.consumer, &o.ev)
			}
		}()
	}
	wg.Wait()
	var ids []int64
	var pays []string
	var first error
	for _, o := range batch {
		if o.err == nil {
			ids, pays = append(ids, o.id), append(pays, o.payment)
			continue
		}
		if !external.Retryable(o.err) {
			// Died after a call (the crash fault), or a failure that will
			// not heal: nothing of the batch is recorded.
			return 0, rollback(ctx, tx, o.err)
		}
		if first == nil {
			first = o.err
		}
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, in.sql.outboxSent, ids, pays); err != nil {
			return 0, rollback(ctx, tx, fmt.Errorf("relay: mark sent: %w", err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("relay: commit: %w", err)
	}
	return len(ids), first
}
