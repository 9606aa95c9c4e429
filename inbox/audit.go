package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The checker judges a cell from what the inbox's tables hold afterwards:
// this file installs the observer it relies on and reads the snapshot it
// judges. The judging itself needs no database (runner.Judge).

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
func InstallAudit(ctx context.Context, db DB, schema string) error {
	_, err := db.Exec(ctx, fmt.Sprintf(auditDDL, pgx.Identifier{schema}.Sanitize()))
	if err != nil {
		return fmt.Errorf("install audit trigger in %s: %w", schema, err)
	}
	return nil
}

// AccountState is one account's final balance and version.
type AccountState struct {
	Balance, Version int64
}

// Transition is one audited change of an account, in commit order.
type Transition struct {
	Aggregate              string
	OldVersion, NewVersion int64
	OldBalance, NewBalance int64
}

// Snapshot is what the checker needs of one consumer's tables after a run.
// Event keys are "source id" (envelope.Event.Key).
type Snapshot struct {
	Accounts map[string]AccountState
	Inbox    map[string]bool // keys with an inbox row for the consumer
	Parked   map[string]bool // keys still parked for the consumer
	// Audited says whether the audit trigger ran for the whole cell;
	// Transitions is empty without it.
	Audited     bool
	Transitions []Transition
}

// ReadSnapshot reads the accounts, the consumer's inbox and parked keys
// and, with audited, the audit log of schema.
func ReadSnapshot(ctx context.Context, db DB, schema, consumer string, audited bool) (*Snapshot, error) {
	s := pgx.Identifier{schema}.Sanitize()
	snap := &Snapshot{Accounts: map[string]AccountState{}, Inbox: map[string]bool{}, Parked: map[string]bool{}, Audited: audited}
	var id, src string
	var st AccountState
	if err := each(ctx, db, "SELECT id, balance, version FROM "+s+".account", []any{&id, &st.Balance, &st.Version},
		func() { snap.Accounts[id] = st }); err != nil {
		return nil, err
	}
	if err := each(ctx, db, "SELECT source, event_id FROM "+s+".inbox WHERE consumer = $1", []any{&src, &id},
		func() { snap.Inbox[src+" "+id] = true }, consumer); err != nil {
		return nil, err
	}
	if err := each(ctx, db, "SELECT source, event_id FROM "+s+".parked WHERE consumer = $1", []any{&src, &id},
		func() { snap.Parked[src+" "+id] = true }, consumer); err != nil {
		return nil, err
	}
	if !audited {
		return snap, nil
	}
	var t Transition
	err := each(ctx, db, "SELECT aggregate_id, old_version, new_version, old_balance, new_balance FROM "+s+".account_audit ORDER BY seq",
		[]any{&t.Aggregate, &t.OldVersion, &t.NewVersion, &t.OldBalance, &t.NewBalance},
		func() { snap.Transitions = append(snap.Transitions, t) })
	if err != nil {
		return nil, fmt.Errorf("%w (was the audit trigger installed?)", err)
	}
	return snap, nil
}

// ParkedCount counts the consumer's parked events in schema.
func ParkedCount(ctx context.Context, db DB, schema, consumer string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".parked WHERE consumer = $1", consumer).Scan(&n)
	return n, err
}

// each scans every row of sql into dst and calls f after each.
func each(ctx context.Context, db DB, sql string, dst []any, f func(), args ...any) error {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("checker: %s: %w", sql, err)
	}
	_, err = pgx.ForEachRow(rows, dst, func() error { f(); return nil })
	if err != nil {
		return fmt.Errorf("checker: %s: %w", sql, err)
	}
	return nil
}
