package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/jackc/pgx/v5"
)

// Negative controls. Each reproduces exactly one mistake from the article
// so the checker can be shown to catch it. They make one attempt per event
// (no retries: a control should not paper over its own failure), never
// park, and hand snapshot events to the correct shared path so that only
// the named mistake differs.

// brokenRun is the frame every negative control shares: mistake decides
// one increment, once.
func (a applier) brokenRun(ctx context.Context, ev *envelope.Event, mistake func(out *Outcome) error) Outcome {
	if err := validate(a.consumer, ev); err != nil || ev.Kind == envelope.Snapshot {
		return a.applyOne(ctx, ev, applyOpts{hook: true})
	}
	start := time.Now()
	out := newOutcome(ev)
	// The partition is infrastructure, not the control's mistake: ensure it
	// the way the correct strategies do.
	attempts, err := a.retry(ctx, func(ctx context.Context) error { return a.ensurePartitions(ctx, ev) })
	if err != nil {
		out.Err = eventErr(a.consumer, ev, a.strategy, err)
		out.Attempts, out.Duration = attempts, time.Since(start)
		return out
	}
	if err := mistake(&out); err != nil {
		out = newOutcome(ev)
		out.Err = eventErr(a.consumer, ev, a.strategy, classify(ctx, err))
	}
	out.Attempts, out.Duration = 1, time.Since(start)
	return out
}

// hook runs Options.BeforeEffect.
func (a applier) hook(ctx context.Context, ev *envelope.Event) error {
	if a.opt.BeforeEffect == nil {
		return nil
	}
	if err := a.opt.BeforeEffect(ctx, a.consumer, ev); err != nil {
		return fmt.Errorf("before effect: %w", err)
	}
	return nil
}

// brokenSplit commits the inbox row on its own, then updates the balance in
// another transaction. If that transaction rolls back, the redelivery finds
// the inbox row and skips: inbox-without-effect (lost-effect).
type brokenSplit struct{ about }

// ApplyBatch implements Strategy.
func (s brokenSplit) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.brokenRun(ctx, ev, func(out *Outcome) error {
			// The mistake: this commits immediately, alone.
			tag, err := in.pool.Exec(ctx, in.sql.inboxInsert, consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev))
			if err != nil {
				return fmt.Errorf("claim inbox key: %w", err)
			}
			if tag.RowsAffected() == 0 {
				out.Result = Duplicate
				return nil
			}
			tx, err := in.pool.Begin(ctx)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			if err := a.hook(ctx, ev); err != nil {
				return rollback(ctx, tx, err)
			}
			n, err := in.updateAccount(ctx, tx, ev)
			if err != nil {
				return rollback(ctx, tx, err)
			}
			if n == 0 {
				var cur int64
				if err := tx.QueryRow(ctx, in.sql.accountVersion, ev.Subject).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return rollback(ctx, tx, err)
				}
				out.Result = Gap
				if ev.AggregateVersion <= cur {
					out.Result = Stale
				}
				return rollback(ctx, tx, nil)
			}
			out.Result = Applied
			if err := tx.Commit(ctx); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			return nil
		})
	})
}

// brokenCheckThenInsert looks in the inbox with a SELECT, trusts the
// answer, applies an increment with no other guard, and inserts the inbox
// row ignoring conflicts. Two concurrent deliveries both see "absent" and
// both apply: duplicate-effect.
type brokenCheckThenInsert struct{ about }

// ApplyBatch implements Strategy.
func (s brokenCheckThenInsert) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.brokenRun(ctx, ev, func(out *Outcome) error {
			tx, err := in.pool.Begin(ctx)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			var seen bool
			if err := tx.QueryRow(ctx, in.sql.inboxExists, consumer, ev.Source, ev.ID).Scan(&seen); err != nil {
				return rollback(ctx, tx, fmt.Errorf("check inbox: %w", err))
			}
			if seen {
				out.Result = Duplicate
				return rollback(ctx, tx, nil)
			}
			if err := a.hook(ctx, ev); err != nil {
				return rollback(ctx, tx, err)
			}
			if _, err := tx.Exec(ctx, in.sql.brokenUnversioned, ev.Subject, ev.Amount, ev.AggregateVersion); err != nil {
				return rollback(ctx, tx, fmt.Errorf("update account: %w", err))
			}
			// The mistake: "we already checked", so the count is ignored.
			if _, err := tx.Exec(ctx, in.sql.inboxInsert, consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev)); err != nil {
				return rollback(ctx, tx, fmt.Errorf("insert inbox row: %w", err))
			}
			out.Result = Applied
			if err := tx.Commit(ctx); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			return nil
		})
	})
}

// dedupKey is the wrong key a negative control dedups on: a scope and a
// key in it.
type dedupKey struct{ scope, key string }

// claimRun is the correct transaction preceded by a dedup claim on the
// wrong key: when the claim is taken, the event is skipped as a duplicate.
func (a applier) claimRun(ctx context.Context, ev *envelope.Event, k dedupKey) Outcome {
	return a.brokenRun(ctx, ev, func(out *Outcome) error {
		o, err := a.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
			tag, err := tx.Exec(ctx, a.sql.brokenClaim, k.scope, k.key)
			if err != nil {
				return Outcome{}, false, fmt.Errorf("claim %s key %q: %w", k.scope, k.key, err)
			}
			if tag.RowsAffected() == 0 {
				o := newOutcome(ev)
				o.Result = Duplicate
				return o, false, nil
			}
			return a.applyInTx(ctx, tx, ev, applyOpts{hook: true})
		})
		*out = o
		return err
	})
}

// brokenGlobalKey dedups on the event id alone, across consumers: the
// second consumer (audit after inventory) skips the event: lost-effect.
type brokenGlobalKey struct{ about }

// ApplyBatch implements Strategy.
func (s brokenGlobalKey) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.claimRun(ctx, ev, dedupKey{"global", ev.ID})
	})
}

// brokenAggregateKey dedups on the aggregate id: the aggregate's later,
// legitimate events are skipped as duplicates: lost-effect.
type brokenAggregateKey struct{ about }

// ApplyBatch implements Strategy.
func (s brokenAggregateKey) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.claimRun(ctx, ev, dedupKey{"aggregate:" + consumer, ev.Subject})
	})
}

// brokenNoVersion dedups correctly but updates unconditionally: gaps jump
// the version and stale events are applied (version-gap, stale-applied).
type brokenNoVersion struct{ about }

// ApplyBatch implements Strategy.
func (s brokenNoVersion) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.brokenRun(ctx, ev, func(out *Outcome) error {
			o, err := in.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
				o := newOutcome(ev)
				tag, err := tx.Exec(ctx, in.sql.inboxInsert, consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev))
				if err != nil {
					return o, false, fmt.Errorf("claim inbox key: %w", err)
				}
				if tag.RowsAffected() == 0 {
					o.Result = Duplicate
					return o, false, nil
				}
				if _, err := tx.Exec(ctx, in.sql.brokenAddAll, ev.Subject, ev.Amount, ev.AggregateVersion); err != nil {
					return o, false, fmt.Errorf("update account: %w", err)
				}
				o.Result = Applied
				return o, true, nil
			})
			*out = o
			return err
		})
	})
}

// brokenAckBeforeCommit is the tx strategy; its mistake is in the consumer,
// which the runner reproduces by acking each delivery before ApplyBatch. A
// crash between ack and commit then loses the event (lost-effect).
type brokenAckBeforeCommit struct{ txStrategy }

// AckBeforeCommit implements AckOrdering.
func (brokenAckBeforeCommit) AckBeforeCommit() bool { return true }

// brokenBrokerDedup trusts the broker's deduplication by message id
// (JetStream drops a publish whose Nats-Msg-Id it stored within its
// Duplicates window) and so claims nothing: every delivery is applied,
// without a version guard. The inbox row is written as a record, never
// consulted. A producer's quick retry never reaches it (the broker
// dropped it); a republish after the window, and a redelivery to a
// consumer (which no publish-side window sees), apply twice:
// duplicate-effect.
type brokenBrokerDedup struct{ about }

// ReliesOnBrokerDedup implements BrokerDedupReliant.
func (brokenBrokerDedup) ReliesOnBrokerDedup() bool { return true }

// ApplyBatch implements Strategy.
func (s brokenBrokerDedup) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.brokenRun(ctx, ev, func(out *Outcome) error {
			o, err := in.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
				o := newOutcome(ev)
				// The mistake: the row count is never read.
				if _, err := tx.Exec(ctx, in.sql.inboxInsert, consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev)); err != nil {
					return o, false, fmt.Errorf("insert inbox row: %w", err)
				}
				if err := a.hook(ctx, ev); err != nil {
					return o, false, err
				}
				if _, err := tx.Exec(ctx, in.sql.brokenUnversioned, ev.Subject, ev.Amount, ev.AggregateVersion); err != nil {
					return o, false, fmt.Errorf("update account: %w", err)
				}
				o.Result = Applied
				return o, true, nil
			})
			*out = o
			return err
		})
	})
}

// brokenTTLDedup dedups on a marker that expires after 100 ms, as a Redis
// key with a TTL would, and writes the inbox row beside the effect without
// trusting it. A redelivery after the TTL passes the marker; only the
// version check stops it (STALE), so the final state is right, yet any
// other side effect of the handler (an e-mail, an outbox message) would
// have run twice: the checker names it dedup-miss.
type brokenTTLDedup struct{ about }

// TTLDedupExpiry is how long broken-ttl-dedup remembers an event.
const TTLDedupExpiry = 100 * time.Millisecond

// ApplyBatch implements Strategy.
func (s brokenTTLDedup) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, s.Name(), consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.brokenRun(ctx, ev, func(out *Outcome) error {
			o, err := in.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
				return a.ttlDedupInTx(ctx, tx, ev)
			})
			*out = o
			return err
		})
	})
}

func (a applier) ttlDedupInTx(ctx context.Context, tx pgx.Tx, ev *envelope.Event) (Outcome, bool, error) {
	o := newOutcome(ev)
	scope := "ttl:" + a.consumer
	if _, err := tx.Exec(ctx, a.sql.brokenForget, scope, TTLDedupExpiry.Microseconds()); err != nil {
		return o, false, fmt.Errorf("expire markers: %w", err)
	}
	tag, err := tx.Exec(ctx, a.sql.brokenClaim, scope, ev.Key())
	if err != nil {
		return o, false, fmt.Errorf("claim marker: %w", err)
	}
	if tag.RowsAffected() == 0 {
		o.Result = Duplicate
		return o, false, nil
	}
	// The inbox row is written, its row count not trusted.
	if _, err := tx.Exec(ctx, a.sql.inboxInsert, a.consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev)); err != nil {
		return o, false, fmt.Errorf("insert inbox row: %w", err)
	}
	n, err := a.updateAccount(ctx, tx, ev)
	if err != nil {
		return o, false, err
	}
	if n == 1 {
		o.Result = Applied
		return o, true, nil
	}
	cur, err := a.lockVersion(ctx, tx, ev.Subject)
	if err != nil {
		return o, false, err
	}
	o.Result = Gap
	if ev.AggregateVersion <= cur {
		o.Result = Stale
	}
	return o, false, nil
}
