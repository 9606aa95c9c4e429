package runner

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// Anomaly names (DESIGN.md): the checker's vocabulary, as Elle's :lost or
// :duplicated.
const (
	LostEffect         = "lost-effect"          // a published event never took effect
	DuplicateEffect    = "duplicate-effect"     // an event took effect twice
	VersionGap         = "version-gap"          // an increment applied while its predecessor was missing
	StaleApplied       = "stale-applied"        // an older version applied over a newer one
	InboxWithoutEffect = "inbox-without-effect" // the split bug: dedup row, no business change
	EffectWithoutInbox = "effect-without-inbox" // a business change with no dedup row
	ParkedStuck        = "parked-stuck"         // held for a predecessor past the end of the run
	ConflictAccepted   = "conflict-accepted"    // idempotency key reused with another payload and accepted
)

// AnomalyNames lists every anomaly in report order.
var AnomalyNames = []string{LostEffect, DuplicateEffect, VersionGap, StaleApplied, InboxWithoutEffect,
	EffectWithoutInbox, ParkedStuck, ConflictAccepted}

// maxExamples bounds the concrete examples kept per anomaly.
const maxExamples = 5

// auditDDL installs the observer the checker relies on: a trigger on the
// business table, owned by the harness rather than the strategy under test,
// that logs every change of an account's version or balance. The log is
// what lets the checker see transitions (v1→v3 is a gap; v3→v2 is stale;
// two changes to v2 are a duplicate) that the final state hides.
const auditDDL = `
CREATE TABLE IF NOT EXISTS %[1]s.account_audit (
    seq          bigserial PRIMARY KEY,
    aggregate_id text   NOT NULL,
    old_version  bigint NOT NULL,
    new_version  bigint NOT NULL,
    old_balance  bigint NOT NULL,
    new_balance  bigint NOT NULL
);
CREATE OR REPLACE FUNCTION %[1]s.account_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.version <> 0 OR NEW.balance <> 0 THEN
            INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
            VALUES (NEW.id, 0, NEW.version, 0, NEW.balance);
        END IF;
    ELSIF OLD.version IS DISTINCT FROM NEW.version OR OLD.balance IS DISTINCT FROM NEW.balance THEN
        INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
        VALUES (NEW.id, OLD.version, NEW.version, OLD.balance, NEW.balance);
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS account_audit ON %[1]s.account;
CREATE TRIGGER account_audit AFTER INSERT OR UPDATE ON %[1]s.account
    FOR EACH ROW EXECUTE FUNCTION %[1]s.account_audit_fn();
`

// InstallAudit adds the audit trigger to schema's account table.
func InstallAudit(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(ctx, fmt.Sprintf(auditDDL, pgx.Identifier{schema}.Sanitize()))
	if err != nil {
		return fmt.Errorf("install audit trigger in %s: %w", schema, err)
	}
	return nil
}

// Check compares the database with the oracle and names every anomaly.
// audit says whether the audit trigger was installed for the whole cell. It
// also returns the durable effects it found: events whose change is in the
// business table (with audit) or whose inbox row exists (without).
func Check(ctx context.Context, pool *pgxpool.Pool, schema, consumer string, plan *workload.Plan, audit bool) (inv results.Invariants, effects int64, err error) {
	s := pgx.Identifier{schema}.Sanitize()
	inv = results.Invariants{Anomalies: map[string]int64{}, Examples: map[string][]string{}}
	add := func(name, example string) {
		inv.Anomalies[name]++
		if len(inv.Examples[name]) < maxExamples {
			inv.Examples[name] = append(inv.Examples[name], example)
		}
	}

	// Events by aggregate and version (the oracle's view).
	byVersion := make(map[string]map[int64]*envelope.Event, len(plan.Expected))
	for _, e := range plan.Events {
		m := byVersion[e.Subject]
		if m == nil {
			m = map[int64]*envelope.Event{}
			byVersion[e.Subject] = m
		}
		m[e.AggregateVersion] = e
	}

	accounts := map[string]workload.State{}
	if err := scan(ctx, pool, "SELECT id, balance, version FROM "+s+".account", func(r pgx.Rows) error {
		var id string
		var st workload.State
		if err := r.Scan(&id, &st.Balance, &st.Version); err != nil {
			return err
		}
		accounts[id] = st
		return nil
	}); err != nil {
		return inv, 0, err
	}
	inInbox := map[string]bool{}
	if err := scan(ctx, pool, "SELECT source, event_id FROM "+s+".inbox WHERE consumer = $1", func(r pgx.Rows) error {
		var src, id string
		if err := r.Scan(&src, &id); err != nil {
			return err
		}
		inInbox[src+" "+id] = true
		return nil
	}, consumer); err != nil {
		return inv, 0, err
	}
	parked := map[string]bool{}
	if err := scan(ctx, pool, "SELECT source, event_id FROM "+s+".parked WHERE consumer = $1", func(r pgx.Rows) error {
		var src, id string
		if err := r.Scan(&src, &id); err != nil {
			return err
		}
		parked[src+" "+id] = true
		return nil
	}, consumer); err != nil {
		return inv, 0, err
	}

	// applied[agg][version] counts the changes that applied that version
	// (a batch may apply consecutive versions in one row update);
	// superseded marks increments whose effect an applied snapshot carries.
	applied := map[string]map[int64]int{}
	superseded := map[string]bool{}
	flagged := map[string]bool{} // aggregates with a per-event anomaly
	if audit {
		err := scan(ctx, pool, "SELECT aggregate_id, old_version, new_version, old_balance, new_balance FROM "+s+".account_audit ORDER BY seq", func(r pgx.Rows) error {
			var agg string
			var oldV, newV, oldB, newB int64
			if err := r.Scan(&agg, &oldV, &newV, &oldB, &newB); err != nil {
				return err
			}
			m := applied[agg]
			if m == nil {
				m = map[int64]int{}
				applied[agg] = m
			}
			events := byVersion[agg]
			e := events[newV]
			if e == nil {
				add(StaleApplied, fmt.Sprintf("%s: changed v%d→v%d, a version no event carries", agg, oldV, newV))
				flagged[agg] = true
				return nil
			}
			if newV <= oldV {
				if m[newV] > 0 && e.Kind == envelope.Increment {
					add(DuplicateEffect, fmt.Sprintf("%s (%s v%d, +%d) took effect again at v%d", e.ID, agg, newV, e.Amount, oldV))
				} else {
					add(StaleApplied, fmt.Sprintf("%s: v%d applied over v%d", e.ID, newV, oldV))
				}
				m[newV]++
				flagged[agg] = true
				return nil
			}
			// Replay the versions this change covers: a batch may apply
			// v4..v9 in one update, a snapshot may jump over increments.
			// The change is whole when the replayed balance matches.
			b, lastSnap, whole := oldB, oldV, true
			for v := oldV + 1; v <= newV; v++ {
				ev := events[v]
				if ev == nil {
					whole = false
					break
				}
				if ev.Kind == envelope.Snapshot {
					b, lastSnap = ev.Amount, v
				} else {
					b += ev.Amount
				}
			}
			covered := []int64{newV}
			if whole && b == newB {
				covered = covered[:0]
				for v := oldV + 1; v <= newV; v++ {
					if v < lastSnap {
						superseded[events[v].Key()] = true
						continue
					}
					covered = append(covered, v)
				}
			} else if e.Kind == envelope.Increment {
				switch {
				case oldV < newV-1:
					add(VersionGap, fmt.Sprintf("%s: increment v%d applied at v%d (v%d missing)", e.ID, newV, oldV, oldV+1))
				case newB-oldB > e.Amount:
					add(DuplicateEffect, fmt.Sprintf("%s (%s v%d): balance grew by %d for an increment of %d", e.ID, agg, newV, newB-oldB, e.Amount))
				default:
					add(LostEffect, fmt.Sprintf("%s (%s v%d): balance grew by %d for an increment of %d", e.ID, agg, newV, newB-oldB, e.Amount))
				}
				flagged[agg] = true
			}
			for _, v := range covered {
				ev := events[v]
				m[v]++
				if m[v] > 1 && ev.Kind == envelope.Increment {
					add(DuplicateEffect, fmt.Sprintf("%s (%s v%d, +%d) took effect %d times", ev.ID, agg, v, ev.Amount, m[v]))
					flagged[agg] = true
				}
				if !inInbox[ev.Key()] {
					add(EffectWithoutInbox, fmt.Sprintf("%s changed %s to v%d but has no inbox row for consumer %s", ev.ID, agg, v, consumer))
					flagged[agg] = true
				}
			}
			return nil
		})
		if err != nil {
			return inv, 0, fmt.Errorf("read audit log (was the audit trigger installed?): %w", err)
		}
	}

	for _, e := range plan.Events {
		k := e.Key()
		if parked[k] {
			add(ParkedStuck, fmt.Sprintf("%s (%s v%d) still parked at the end of the run", e.ID, e.Subject, e.AggregateVersion))
			flagged[e.Subject] = true
			continue
		}
		if !audit {
			if inInbox[k] {
				effects++
			}
			if !inInbox[k] && accounts[e.Subject].Version < e.AggregateVersion {
				add(LostEffect, fmt.Sprintf("%s (%s v%d) never took effect", e.ID, e.Subject, e.AggregateVersion))
				flagged[e.Subject] = true
			}
			continue
		}
		took := applied[e.Subject][e.AggregateVersion] > 0
		if took {
			effects++
		}
		switch {
		case took || superseded[k]:
		case inInbox[k]:
			add(InboxWithoutEffect, fmt.Sprintf("%s (%s v%d) has an inbox row for %s but never changed the account", e.ID, e.Subject, e.AggregateVersion, consumer))
			flagged[e.Subject] = true
		default:
			add(LostEffect, fmt.Sprintf("%s (%s v%d, +%d) never took effect", e.ID, e.Subject, e.AggregateVersion, e.Amount))
			flagged[e.Subject] = true
		}
	}

	// Replays under a new event id and requests reusing an idempotency key
	// with other content must have had no effect at all.
	for _, e := range plan.MustNotApply {
		if inInbox[e.Key()] {
			add(ConflictAccepted, fmt.Sprintf("%s (key %s/%s/%s, amount %d) was accepted: it has an inbox row", e.ID, e.Tenant, e.Operation, e.IdempotencyKey, e.Amount))
			flagged[e.Subject] = true
		} else if st, ok := accounts[e.Subject]; ok && plan.Expected[e.Subject] == (workload.State{}) && (st.Version != 0 || st.Balance != 0) {
			add(ConflictAccepted, fmt.Sprintf("%s (key %s/%s/%s) changed %s to balance %d", e.ID, e.Tenant, e.Operation, e.IdempotencyKey, e.Subject, st.Balance))
		}
	}

	// Final state against the oracle; reported only where no per-event
	// anomaly already explains the aggregate, so one mistake counts once.
	aggs := make([]string, 0, len(plan.Expected))
	for a := range plan.Expected {
		aggs = append(aggs, a)
	}
	sort.Strings(aggs)
	for _, a := range aggs {
		want, got := plan.Expected[a], accounts[a]
		if want == got || flagged[a] {
			continue
		}
		ex := fmt.Sprintf("%s: balance %d version %d, expected balance %d version %d", a, got.Balance, got.Version, want.Balance, want.Version)
		switch {
		case got.Version < want.Version || got.Balance < want.Balance:
			add(LostEffect, ex)
		case got.Version > want.Version:
			add(VersionGap, ex)
		default:
			add(DuplicateEffect, ex)
		}
	}
	inv.Verdict = "PASS"
	for _, n := range inv.Anomalies {
		if n > 0 {
			inv.Verdict = "FAIL"
		}
	}
	return inv, effects, nil
}

func scan(ctx context.Context, pool *pgxpool.Pool, sql string, each func(pgx.Rows) error, args ...any) error {
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("checker: %s: %w", sql, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
