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

// brokenRun is the frame every negative control shares.
func (in *Inbox) brokenRun(ctx context.Context, name, consumer string, ev *envelope.Event, f func(out *Outcome) error) Outcome {
	if err := validate(consumer, ev); err != nil || ev.Kind == envelope.Snapshot {
		return in.applyOne(ctx, name, consumer, ev, applyOpts{hook: true})
	}
	start := time.Now()
	out := newOutcome(ev)
	// The partition is infrastructure, not the control's mistake: ensure it
	// the way the correct strategies do.
	attempts, err := in.retry(ctx, func(ctx context.Context) error { return in.ensurePartitions(ctx, ev) })
	if err != nil {
		out.Err = eventErr(consumer, ev, name, err)
		out.Attempts, out.Duration = attempts, time.Since(start)
		return out
	}
	if err := f(&out); err != nil {
		out = newOutcome(ev)
		out.Err = eventErr(consumer, ev, name, classify(ctx, err))
	}
	out.Attempts, out.Duration = 1, time.Since(start)
	return out
}

func (in *Inbox) hook(ctx context.Context, consumer string, ev *envelope.Event) error {
	if in.opt.BeforeEffect == nil {
		return nil
	}
	if err := in.opt.BeforeEffect(ctx, consumer, ev); err != nil {
		return fmt.Errorf("before effect: %w", err)
	}
	return nil
}

// brokenSplit commits the inbox row on its own, then updates the balance in
// another transaction. If that transaction rolls back, the redelivery finds
// the inbox row and skips: inbox-without-effect (lost-effect).
type brokenSplit struct{}

func (brokenSplit) Name() string { return "broken-split" }
func (brokenSplit) Description() string {
	return "inbox row in autocommit, business update in a second transaction that may roll back (split commit → inbox-without-effect)"
}
func (brokenSplit) Broken() bool { return true }
func (brokenSplit) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.brokenRun(ctx, "broken-split", consumer, ev, func(out *Outcome) error {
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
			if err := in.hook(ctx, consumer, ev); err != nil {
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
type brokenCheckThenInsert struct{}

func (brokenCheckThenInsert) Name() string { return "broken-check-then-insert" }
func (brokenCheckThenInsert) Description() string {
	return "SELECT the inbox, then apply and INSERT … ON CONFLICT DO NOTHING ignoring the row count: the check, not the primary key, decides (races → duplicate-effect)"
}
func (brokenCheckThenInsert) Broken() bool { return true }
func (brokenCheckThenInsert) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.brokenRun(ctx, "broken-check-then-insert", consumer, ev, func(out *Outcome) error {
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
			if err := in.hook(ctx, consumer, ev); err != nil {
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
func (in *Inbox) claimRun(ctx context.Context, name, consumer string, ev *envelope.Event, k dedupKey) Outcome {
	return in.brokenRun(ctx, name, consumer, ev, func(out *Outcome) error {
		o, err := in.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
			tag, err := tx.Exec(ctx, in.sql.brokenClaim, k.scope, k.key)
			if err != nil {
				return Outcome{}, false, fmt.Errorf("claim %s key %q: %w", k.scope, k.key, err)
			}
			if tag.RowsAffected() == 0 {
				o := newOutcome(ev)
				o.Result = Duplicate
				return o, false, nil
			}
			return in.applyInTx(ctx, tx, consumer, ev, applyOpts{hook: true})
		})
		*out = o
		return err
	})
}

// brokenGlobalKey dedups on the event id alone, across consumers: the
// second consumer (audit after inventory) skips the event: lost-effect.
type brokenGlobalKey struct{}

func (brokenGlobalKey) Name() string { return "broken-global-key" }
func (brokenGlobalKey) Description() string {
	return "dedup key is the event id alone, shared by all consumers: a second consumer skips the event (lost-effect)"
}
func (brokenGlobalKey) Broken() bool { return true }
func (brokenGlobalKey) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.claimRun(ctx, "broken-global-key", consumer, ev, dedupKey{"global", ev.ID})
	})
}

// brokenAggregateKey dedups on the aggregate id: the aggregate's later,
// legitimate events are skipped as duplicates: lost-effect.
type brokenAggregateKey struct{}

func (brokenAggregateKey) Name() string { return "broken-aggregate-key" }
func (brokenAggregateKey) Description() string {
	return "dedup key is the aggregate id: the aggregate's later legitimate events are skipped (lost-effect)"
}
func (brokenAggregateKey) Broken() bool { return true }
func (brokenAggregateKey) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.claimRun(ctx, "broken-aggregate-key", consumer, ev, dedupKey{"aggregate:" + consumer, ev.Subject})
	})
}

// brokenNoVersion dedups correctly but updates unconditionally: gaps jump
// the version and stale events are applied (version-gap, stale-applied).
type brokenNoVersion struct{}

func (brokenNoVersion) Name() string { return "broken-no-version" }
func (brokenNoVersion) Description() string {
	return "correct inbox, unconditional update ignoring versions: gaps and stale events are applied (version-gap, stale-applied)"
}
func (brokenNoVersion) Broken() bool { return true }
func (brokenNoVersion) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.brokenRun(ctx, "broken-no-version", consumer, ev, func(out *Outcome) error {
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

func (brokenAckBeforeCommit) Name() string { return "broken-ack-before-commit" }
func (brokenAckBeforeCommit) Description() string {
	return "consumer-level: acks the delivery before the tx strategy commits; a crash in between loses the event (lost-effect). The runner implements the ack ordering"
}
func (brokenAckBeforeCommit) Broken() bool          { return true }
func (brokenAckBeforeCommit) AckBeforeCommit() bool { return true }

// brokenTTLDedup dedups on a marker that expires after 100 ms, as a Redis
// key with a TTL would, and writes the inbox row beside the effect without
// trusting it. A redelivery after the TTL passes the marker; only the
// version check stops it (STALE), so the final state is right, yet any
// other side effect of the handler (an e-mail, an outbox message) would
// have run twice: the checker names it dedup-miss.
type brokenTTLDedup struct{}

// TTLDedupExpiry is how long broken-ttl-dedup remembers an event.
const TTLDedupExpiry = 100 * time.Millisecond

func (brokenTTLDedup) Name() string { return "broken-ttl-dedup" }
func (brokenTTLDedup) Description() string {
	return "dedup marker that expires after 100ms (a TTL cache); the version check alone stops a later redelivery, as STALE (dedup-miss)"
}
func (brokenTTLDedup) Broken() bool { return true }
func (brokenTTLDedup) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return in.brokenRun(ctx, "broken-ttl-dedup", consumer, ev, func(out *Outcome) error {
			o, err := in.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
				return in.ttlDedupInTx(ctx, tx, consumer, ev)
			})
			*out = o
			return err
		})
	})
}

func (in *Inbox) ttlDedupInTx(ctx context.Context, tx pgx.Tx, consumer string, ev *envelope.Event) (Outcome, bool, error) {
	o := newOutcome(ev)
	scope := "ttl:" + consumer
	if _, err := tx.Exec(ctx, in.sql.brokenForget, scope, TTLDedupExpiry.Microseconds()); err != nil {
		return o, false, fmt.Errorf("expire markers: %w", err)
	}
	tag, err := tx.Exec(ctx, in.sql.brokenClaim, scope, ev.Key())
	if err != nil {
		return o, false, fmt.Errorf("claim marker: %w", err)
	}
	if tag.RowsAffected() == 0 {
		o.Result = Duplicate
		return o, false, nil
	}
	// The inbox row is written, its row count not trusted.
	if _, err := tx.Exec(ctx, in.sql.inboxInsert, consumer, ev.Source, ev.ID, ev.Subject, ev.AggregateVersion, eventTime(ev)); err != nil {
		return o, false, fmt.Errorf("insert inbox row: %w", err)
	}
	n, err := in.updateAccount(ctx, tx, ev)
	if err != nil {
		return o, false, err
	}
	if n == 1 {
		o.Result = Applied
		return o, true, nil
	}
	cur, err := in.lockVersion(ctx, tx, ev.Subject)
	if err != nil {
		return o, false, err
	}
	o.Result = Gap
	if ev.AggregateVersion <= cur {
		o.Result = Stale
	}
	return o, false, nil
}
