package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/jackc/pgx/v5"
)

// applyOpts select the behaviour of the shared per-event path.
type applyOpts struct {
	parking bool // park version-ahead increments (else GAP)
	hook    bool // call Options.BeforeEffect
	// then runs in an increment's transaction once the change applied,
	// before the commit (an external call, an outbox write); its error
	// rolls everything back. Snapshots never run it.
	then func(ctx context.Context, tx pgx.Tx) error
}

func (in *Inbox) defaultApplyOpts() applyOpts {
	return applyOpts{parking: in.opt.Parking(), hook: true}
}

// applier applies events for one consumer on behalf of one strategy: the
// shared per-event path, and the decisions taken inside an event's
// transaction, are its methods. strategy names the strategy in the
// events' errors ("" where no strategy applies, as in DrainParked).
type applier struct {
	*Inbox
	strategy, consumer string
}

// applyOne applies one event in its own transaction, retrying retryable
// failures. It is the tx strategy, and the path every other strategy falls
// back to for idempotency keys, snapshots and version decisions.
func (a applier) applyOne(ctx context.Context, ev *envelope.Event, ao applyOpts) Outcome {
	if o, bad := invalid(a.consumer, ev); bad {
		return o
	}
	return a.retried(ctx, ev, func(ctx context.Context) (Outcome, error) {
		return a.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
			o, commit, err := a.applyInTx(ctx, tx, ev, ao)
			if err != nil || !commit || o.Result != Applied || ao.then == nil || ev.Kind == envelope.Snapshot {
				return o, commit, err
			}
			return o, true, ao.then(ctx, tx)
		})
	})
}

// retried runs attempt for ev under the inbox's retries, its partition
// ensured first, and turns a failure that stayed into ev's outcome with
// the error; Attempts and Duration are set either way.
func (a applier) retried(ctx context.Context, ev *envelope.Event, attempt func(ctx context.Context) (Outcome, error)) Outcome {
	start := time.Now()
	var out Outcome
	attempts, err := a.retry(ctx, func(ctx context.Context) error {
		if err := a.ensurePartitions(ctx, ev); err != nil {
			return err
		}
		var err error
		out, err = attempt(ctx)
		return err
	})
	if err != nil {
		out = newOutcome(ev)
		out.Err = eventErr(a.consumer, ev, a.strategy, err)
	}
	out.Attempts, out.Duration = attempts, time.Since(start)
	return out
}

// inTx runs f in a transaction, committing when f says so and rolling back
// otherwise. A rejected event (GAP, STALE, CONFLICT, DUPLICATE) is rolled
// back so that its inbox claim disappears with it.
func (in *Inbox) inTx(ctx context.Context, f func(pgx.Tx) (Outcome, bool, error)) (Outcome, error) {
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("begin: %w", err)
	}
	out, commit, err := f(tx)
	if err != nil {
		return Outcome{}, rollback(ctx, tx, err)
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			// The commit's fate is unknown; retrying is safe because the
			// inbox row turns a second attempt into a DUPLICATE.
			return Outcome{}, fmt.Errorf("commit: %w", err)
		}
		return out, nil
	}
	if err := tx.Rollback(ctx); err != nil {
		return Outcome{}, fmt.Errorf("rollback after %s: %w", out.Result, err)
	}
	return out, nil
}

// applyInTx decides one event inside tx and reports whether to commit.
func (a applier) applyInTx(ctx context.Context, tx pgx.Tx, ev *envelope.Event, ao applyOpts) (Outcome, bool, error) {
	out := newOutcome(ev)
	// The article's first statement: the primary key arbitrates between
	// concurrent deliveries; a SELECT beforehand would prove nothing. With
	// parking on it is guarded against claiming a parked event's key.
	if ao.parking {
		var parked, claimed bool
		err := tx.QueryRow(ctx, a.sql.inboxClaimGuarded, a.consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev)).Scan(&parked, &claimed)
		switch {
		case err != nil:
			return out, false, fmt.Errorf("claim inbox key: %w", err)
		case parked:
			a.counters.parked.Add(1)
			out.Result = Parked
			return out, false, nil
		case !claimed:
			out.Result = Duplicate
			return out, false, nil
		}
	} else {
		tag, err := tx.Exec(ctx, a.sql.inboxInsert, a.consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev))
		if err != nil {
			return out, false, fmt.Errorf("claim inbox key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			out.Result = Duplicate
			return out, false, nil
		}
	}
	if ev.IdempotencyKey != "" {
		res, stored, err := a.claimKey(ctx, tx, ev)
		if err != nil {
			return out, false, err
		}
		if res != NoResult {
			out.Result, out.StoredResult = res, stored
			return out, false, nil
		}
	}
	if ao.hook && a.opt.BeforeEffect != nil {
		if err := a.opt.BeforeEffect(ctx, a.consumer, ev); err != nil {
			return out, false, fmt.Errorf("before effect: %w", err)
		}
	}
	if ev.Kind == envelope.Snapshot {
		return a.applySnapshot(ctx, tx, ev, ao)
	}
	for try := 0; ; try++ {
		n, err := a.updateAccount(ctx, tx, ev)
		if err != nil {
			return out, false, err
		}
		if n == 1 {
			break
		}
		// 0 rows: read the version under a row lock to tell stale, ahead
		// and "predecessor just committed" apart. The lock also orders this
		// decision against the predecessor's drain check (see park).
		cur, err := a.lockVersion(ctx, tx, ev.Subject)
		if err != nil {
			return out, false, err
		}
		v := ev.AggregateVersion
		switch {
		case v <= cur:
			out.Result = Stale
			return out, false, nil
		case v == cur+1:
			if try >= 2 {
				return out, false, fmt.Errorf("account %s is at version %d under lock, yet the update for version %d matched no row", ev.Subject, cur, v)
			}
			continue
		case !ao.parking:
			out.Result = Gap
			return out, false, nil
		default:
			return a.park(ctx, tx, ev, out)
		}
	}
	return a.applied(ctx, tx, out, ao)
}

// applied marks out APPLIED and, with parking on, drains the parked
// successors of the version it reached; commit, unless that failed.
func (a applier) applied(ctx context.Context, tx pgx.Tx, out Outcome, ao applyOpts) (Outcome, bool, error) {
	out.Result = Applied
	if ao.parking {
		drained, err := a.drainIfParked(ctx, tx, out.Subject, out.Version)
		if err != nil {
			return out, false, err
		}
		out.Drained = drained
	}
	return out, true, nil
}

// updateAccount is the article's second statement: the conditional update
// (or, for version 1, the creating upsert). It returns the affected rows.
func (in *Inbox) updateAccount(ctx context.Context, tx pgx.Tx, ev *envelope.Event) (int64, error) {
	var err error
	var n int64
	if ev.AggregateVersion == 1 {
		tag, e := tx.Exec(ctx, in.sql.accountCreateV1, ev.Subject, ev.Amount)
		n, err = tag.RowsAffected(), e
	} else {
		tag, e := tx.Exec(ctx, in.sql.accountUpdate, ev.Subject, ev.Amount, ev.AggregateVersion)
		n, err = tag.RowsAffected(), e
	}
	if err != nil {
		return 0, fmt.Errorf("update account %s: %w", ev.Subject, err)
	}
	return n, nil
}

// lockVersion returns the aggregate's version with its row locked. A
// missing account is created at (id, 0, 0) first: without a row to lock, a
// park decision could race with the predecessor's drain check.
func (in *Inbox) lockVersion(ctx context.Context, tx pgx.Tx, agg string) (int64, error) {
	for range 3 {
		var v int64
		err := tx.QueryRow(ctx, in.sql.accountLock, agg).Scan(&v)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("lock account %s: %w", agg, err)
		}
		if _, err := tx.Exec(ctx, in.sql.accountEnsure, agg); err != nil {
			return 0, fmt.Errorf("create account %s: %w", agg, err)
		}
	}
	return 0, fmt.Errorf("lock account %s: the row vanished while locking it", agg)
}

// park holds a version-ahead increment in the parked table, in the same
// transaction as the decision, under the account row lock. The lock is what
// makes parking safe: the predecessor's update either ran before it (then
// this transaction saw the new version and did not park) or waits for it
// (then the predecessor's drain check, a later statement with a fresh
// snapshot, sees this parked row).
func (a applier) park(ctx context.Context, tx pgx.Tx, ev *envelope.Event, out Outcome) (Outcome, bool, error) {
	var total, self int64
	if err := tx.QueryRow(ctx, a.sql.parkedCount, a.consumer, ev.Subject, ev.Source, ev.ID).Scan(&total, &self); err != nil {
		return out, false, fmt.Errorf("count parked events of %s: %w", ev.Subject, err)
	}
	if self == 0 && total >= int64(a.opt.ParkMaxPerAggregate) {
		// Counted and reported, not dropped: nothing commits, so the
		// transport redelivers the event later.
		a.counters.parkOverflow.Add(1)
		out.Result, out.ParkOverflow = Gap, true
		return out, false, nil
	}
	// A parked event has no inbox row (draining writes it), so remove the
	// claim made at the start of this transaction, and the idempotency
	// claim with it.
	if _, err := tx.Exec(ctx, a.sql.inboxDelete, a.consumer, ev.Source, ev.ID, eventTime(ev)); err != nil {
		return out, false, fmt.Errorf("withdraw inbox claim to park: %w", err)
	}
	if ev.IdempotencyKey != "" {
		if _, err := tx.Exec(ctx, a.sql.idemDelete, ev.Tenant, ev.Operation, ev.IdempotencyKey, ev.Source, ev.ID); err != nil {
			return out, false, fmt.Errorf("withdraw idempotency claim to park: %w", err)
		}
	}
	if self == 0 {
		if _, err := tx.Exec(ctx, a.sql.parkInsert, a.consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, ev.Kind, ev.Amount,
			ev.Type, nullTime(ev.Time), ev.IdempotencyKey, ev.Tenant, ev.Operation); err != nil {
			return out, false, fmt.Errorf("park: %w", err)
		}
	}
	a.counters.parked.Add(1)
	out.Result = Parked
	return out, true, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// drainIfParked drains the aggregate's parked successors when it has any.
// It must run as a statement after the one that took the row lock: only a
// fresh snapshot sees parks that committed while this transaction waited.
func (a applier) drainIfParked(ctx context.Context, tx pgx.Tx, agg string, cur int64) ([]Outcome, error) {
	var exists bool
	if err := tx.QueryRow(ctx, a.sql.parkedExists, a.consumer, agg).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for parked successors of %s: %w", agg, err)
	}
	if !exists {
		return nil, nil
	}
	return a.drainInTx(ctx, tx, agg, cur)
}

// drainInTx applies, in version order, the parked events of agg that follow
// cur, writing each one's inbox row; parked events at or below the version
// reached are removed as STALE (a snapshot overtook them, or a second event
// carried the same version). The caller holds the account row lock.
func (a applier) drainInTx(ctx context.Context, tx pgx.Tx, agg string, cur int64) ([]Outcome, error) {
	var outs []Outcome
	for {
		rows, err := tx.Query(ctx, a.sql.parkedNext, a.consumer, agg, cur+1)
		if err != nil {
			return outs, fmt.Errorf("read parked events of %s: %w", agg, err)
		}
		evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*envelope.Event, error) {
			return scanParked(r, agg)
		})
		if err != nil {
			return outs, fmt.Errorf("read parked events of %s: %w", agg, err)
		}
		progressed := false
		for _, ev := range evs {
			if ev.AggregateVersion > cur+1 {
				continue
			}
			if _, err := tx.Exec(ctx, a.sql.parkedDelete, a.consumer, ev.Source, ev.ID); err != nil {
				return outs, fmt.Errorf("unpark %s: %w", ev.Key(), err)
			}
			o := newOutcome(ev)
			if ev.AggregateVersion <= cur {
				// A redelivery decided by the one-statement path can apply
				// the event while its parked copy, committed a moment
				// before, was outside that statement's snapshot: then the
				// copy is the inbox's DUPLICATE, not STALE.
				var seen bool
				if err := tx.QueryRow(ctx, a.sql.inboxExists, a.consumer, ev.Source, ev.ID).Scan(&seen); err != nil {
					return outs, fmt.Errorf("unpark %s: look up its inbox key: %w", ev.Key(), err)
				}
				o.Result = Stale
				if seen {
					o.Result = Duplicate
				}
				outs = append(outs, o)
				continue
			}
			o, err = a.applyDrained(ctx, tx, ev, o)
			if err != nil {
				return outs, err
			}
			if o.Result == Applied {
				cur++
				progressed = true
				a.counters.drained.Add(1)
			}
			outs = append(outs, o)
		}
		if !progressed {
			return outs, nil
		}
	}
}

// applyDrained applies a parked event whose predecessor is committed (or
// being committed by this transaction), under the account lock.
func (a applier) applyDrained(ctx context.Context, tx pgx.Tx, ev *envelope.Event, o Outcome) (Outcome, error) {
	tag, err := tx.Exec(ctx, a.sql.inboxInsert, a.consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev))
	if err != nil {
		return o, fmt.Errorf("drain %s: claim inbox key: %w", ev.Key(), err)
	}
	if tag.RowsAffected() == 0 {
		o.Result = Duplicate
		return o, nil
	}
	if ev.IdempotencyKey != "" {
		res, stored, err := a.claimKey(ctx, tx, ev)
		if err != nil {
			return o, fmt.Errorf("drain %s: %w", ev.Key(), err)
		}
		if res != NoResult {
			if _, err := tx.Exec(ctx, a.sql.inboxDelete, a.consumer, ev.Source, ev.ID, eventTime(ev)); err != nil {
				return o, fmt.Errorf("drain %s: withdraw inbox claim: %w", ev.Key(), err)
			}
			o.Result, o.StoredResult = res, stored
			return o, nil
		}
	}
	n, err := a.updateAccount(ctx, tx, ev)
	if err != nil {
		return o, fmt.Errorf("drain %s: %w", ev.Key(), err)
	}
	if n != 1 {
		return o, fmt.Errorf("drain %s: account %s did not accept version %d under lock", ev.Key(), ev.Subject, ev.AggregateVersion)
	}
	o.Result = Applied
	return o, nil
}

// scanParked reads a parked row (as selected by parkedNext, optionally
// prefixed by aggregate_id when agg is "").
func scanParked(r pgx.CollectableRow, agg string) (*envelope.Event, error) {
	ev := &envelope.Event{SpecVersion: envelope.SpecVersion, Subject: agg}
	var t *time.Time
	var err error
	if agg == "" {
		err = r.Scan(&ev.Subject, &ev.Source, &ev.ID, &ev.AggregateVersion, &ev.Kind, &ev.Amount, &ev.Type, &t, &ev.IdempotencyKey, &ev.Tenant, &ev.Operation)
	} else {
		err = r.Scan(&ev.Source, &ev.ID, &ev.AggregateVersion, &ev.Kind, &ev.Amount, &ev.Type, &t, &ev.IdempotencyKey, &ev.Tenant, &ev.Operation)
	}
	if t != nil {
		ev.Time = *t
	}
	return ev, err
}

// applySnapshot is the keep-latest path shared by every strategy: a newer
// snapshot overwrites balance and version; an older or equal one is STALE.
// Dedup is still the inbox's: the inbox key (and an idempotency key) was
// claimed before.
func (a applier) applySnapshot(ctx context.Context, tx pgx.Tx, ev *envelope.Event, ao applyOpts) (Outcome, bool, error) {
	out := newOutcome(ev)
	tag, err := tx.Exec(ctx, a.sql.snapshotUpsert, ev.Subject, ev.Amount, ev.AggregateVersion)
	if err != nil {
		return out, false, fmt.Errorf("apply snapshot to %s: %w", ev.Subject, err)
	}
	if tag.RowsAffected() == 0 {
		out.Result = Stale
		return out, false, nil
	}
	// Parked increments up to the snapshot's version are now stale; the
	// next one may apply.
	return a.applied(ctx, tx, out, ao)
}

// RequestHash is the hash stored with an idempotency key: the business
// content of the request (tenant, operation, subject, kind, amount), not
// its identity, version or attempt.
func RequestHash(ev *envelope.Event) string {
	h := sha256.New()
	for _, f := range []string{ev.Tenant, ev.Operation, ev.Subject, ev.Kind, strconv.FormatInt(ev.Amount, 10)} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// storedResult is what a replay of the key gets back.
func storedResult(ev *envelope.Event) string {
	b, _ := json.Marshal(struct {
		Result  string `json:"result"`
		Source  string `json:"source"`
		ID      string `json:"id"`
		Subject string `json:"subject"`
		Version int64  `json:"version"`
	}{Applied.String(), ev.Source, ev.ID, ev.Subject, ev.AggregateVersion})
	return string(b)
}

// claimKey claims the event's idempotency key in tx. NoResult means the key
// is now ours (it commits only with the effect); DUPLICATE carries the
// first request's stored result; CONFLICT means the key was used for a
// different request and the event must be rejected.
func (a applier) claimKey(ctx context.Context, tx pgx.Tx, ev *envelope.Event) (Result, string, error) {
	hash := RequestHash(ev)
	for range 3 {
		tag, err := tx.Exec(ctx, a.sql.idemClaim, ev.Tenant, ev.Operation, ev.IdempotencyKey, hash, storedResult(ev), a.consumer, ev.Source, ev.ID)
		if err != nil {
			return NoResult, "", fmt.Errorf("claim idempotency key %s/%s/%s: %w", ev.Tenant, ev.Operation, ev.IdempotencyKey, err)
		}
		if tag.RowsAffected() == 1 {
			return NoResult, "", nil
		}
		var gotHash, result string
		err = tx.QueryRow(ctx, a.sql.idemGet, ev.Tenant, ev.Operation, ev.IdempotencyKey).Scan(&gotHash, &result)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // its claimer withdrew it (parked) after we waited; claim again
		}
		if err != nil {
			return NoResult, "", fmt.Errorf("read idempotency key %s/%s/%s: %w", ev.Tenant, ev.Operation, ev.IdempotencyKey, err)
		}
		if gotHash == hash {
			return Duplicate, result, nil
		}
		return Conflict, "", nil
	}
	return NoResult, "", fmt.Errorf("claim idempotency key %s/%s/%s: it keeps disappearing", ev.Tenant, ev.Operation, ev.IdempotencyKey)
}

// DrainParked drains every aggregate of consumer that has parked events,
// each in its own transaction. The strategies drain right after the
// predecessor commits; this is the recovery path for a process that died
// between a one-statement apply and its drain, and a final sweep before a
// run is checked.
func (in *Inbox) DrainParked(ctx context.Context, consumer string) ([]Outcome, error) {
	a := applier{Inbox: in, consumer: consumer}
	return in.drainEach(ctx, consumer, func(agg string) ([]Outcome, error) { return a.drainAggregate(ctx, agg) })
}

// drainEach drains, with drain, every aggregate of consumer that has
// parked events (the built-ins' DrainParked and a strategy file's).
func (in *Inbox) drainEach(ctx context.Context, consumer string, drain func(agg string) ([]Outcome, error)) ([]Outcome, error) {
	rows, err := in.pool.Query(ctx, in.sql.drainCandidates, consumer)
	if err != nil {
		return nil, fmt.Errorf("inbox: consumer %q: list parked aggregates: %w", consumer, err)
	}
	aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("inbox: consumer %q: list parked aggregates: %w", consumer, err)
	}
	var all []Outcome
	for _, agg := range aggs {
		outs, err := drain(agg)
		all = append(all, outs...)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

// drainAggregate locks agg and drains its parked successors in a new
// transaction, with retries.
func (a applier) drainAggregate(ctx context.Context, agg string) ([]Outcome, error) {
	var outs []Outcome
	_, err := a.retry(ctx, func(ctx context.Context) error {
		o, err := a.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
			cur, err := a.lockVersion(ctx, tx, agg)
			if err != nil {
				return Outcome{}, false, err
			}
			d, err := a.drainInTx(ctx, tx, agg, cur)
			return Outcome{Drained: d}, true, err
		})
		outs = o.Drained
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: consumer %q: drain parked events of %s: %w", a.consumer, agg, err)
	}
	return outs, nil
}
