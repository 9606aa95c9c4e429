package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The checker judges a cell from what the inbox's tables hold afterwards:
// this file installs the observer it relies on and reads the snapshot it
// judges. The judging itself needs no database (runner.Judge).

// The audit log is what lets the checker see transitions (v1→v3 is a gap;
// v3→v2 is stale; two changes to v2 are a duplicate) that the final state
// hides. It is written by triggers on the business table, owned by the
// harness rather than the strategy under test, into account_audit: one row
// per captured statement (or changed row), each holding parallel arrays of
// (aggregate, old/new version, old/new balance), ordered by seq.
//
// What it costs is part of every audited figure, so it is built to be cheap:
//
//   - The table is UNLOGGED: no WAL, so nothing of it adds to the commit's
//     flush. A server crash empties an unlogged table at recovery; a
//     sentinel row (seq 0) written at install tells ReadSnapshot, which
//     then refuses to judge instead of reporting every effect lost. A cell
//     whose server crashed is measured nothing worth keeping anyway; the
//     business tables, which are logged, are untouched by this choice.
//   - It has no index: seq orders it when it is read, once, after the cell.
//   - Two capture modes, picked per cell for the strategy's statements
//     (AuditFor): a row trigger with a WHEN clause (no function call for a
//     row that did not change) for strategies that change one account per
//     statement, and a statement trigger with transition tables (REFERENCING
//     OLD TABLE / NEW TABLE: one INSERT … SELECT per statement, however many
//     rows it changed) for set-based ones such as batch.
//
// Order: the checker needs each aggregate's transitions in commit order
// (runner.Judge folds them per aggregate; the order between aggregates only
// picks which examples are shown). An AFTER trigger runs inside the
// changing transaction, while it holds the account's row lock, so the next
// change of that account (which waits for the lock, hence for the commit)
// always draws a later seq. One statement changes a row at most once, so
// the rows of one statement's entry are distinct aggregates.
const auditTableDDL = `
DROP TRIGGER IF EXISTS account_audit ON %[1]s.account;
DROP TRIGGER IF EXISTS account_audit_ins ON %[1]s.account;
DROP TRIGGER IF EXISTS account_audit_upd ON %[1]s.account;
DROP TABLE IF EXISTS %[1]s.account_audit;
CREATE UNLOGGED TABLE %[1]s.account_audit (
    seq          bigserial,
    aggregate_id text[]   NOT NULL,
    old_version  bigint[] NOT NULL,
    new_version  bigint[] NOT NULL,
    old_balance  bigint[] NOT NULL,
    new_balance  bigint[] NOT NULL
);
INSERT INTO %[1]s.account_audit VALUES (0, '{}', '{}', '{}', '{}', '{}');
`

// auditRowDDL captures each changed row with its own INSERT. The WHEN
// clauses keep rows that changed nothing (an account created at (id, 0, 0)
// to be locked, an update to the same values) from calling the function.
const auditRowDDL = `
CREATE OR REPLACE FUNCTION %[1]s.account_audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
        VALUES (ARRAY[NEW.id], '{0}', ARRAY[NEW.version], '{0}', ARRAY[NEW.balance]);
    ELSE
        INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
        VALUES (ARRAY[NEW.id], ARRAY[OLD.version], ARRAY[NEW.version], ARRAY[OLD.balance], ARRAY[NEW.balance]);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER account_audit_ins AFTER INSERT ON %[1]s.account FOR EACH ROW
    WHEN (NEW.version <> 0 OR NEW.balance <> 0)
    EXECUTE FUNCTION %[1]s.account_audit_row();
CREATE TRIGGER account_audit_upd AFTER UPDATE ON %[1]s.account FOR EACH ROW
    WHEN (OLD.version IS DISTINCT FROM NEW.version OR OLD.balance IS DISTINCT FROM NEW.balance)
    EXECUTE FUNCTION %[1]s.account_audit_row();
`

// auditStatementDDL captures each statement's changed rows with one INSERT
// from its transition tables. Old and new rows are matched by id, which no
// strategy changes. An INSERT … ON CONFLICT DO UPDATE fires both triggers,
// each with the rows it inserted or updated.
const auditStatementDDL = `
CREATE OR REPLACE FUNCTION %[1]s.account_audit_ins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
    SELECT array_agg(n.id), array_agg(0::bigint), array_agg(n.version), array_agg(0::bigint), array_agg(n.balance)
    FROM new_rows n WHERE n.version <> 0 OR n.balance <> 0
    HAVING count(*) > 0;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION %[1]s.account_audit_upd() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
    SELECT array_agg(n.id), array_agg(o.version), array_agg(n.version), array_agg(o.balance), array_agg(n.balance)
    FROM old_rows o JOIN new_rows n ON n.id = o.id
    WHERE o.version IS DISTINCT FROM n.version OR o.balance IS DISTINCT FROM n.balance
    HAVING count(*) > 0;
    RETURN NULL;
END $$;
CREATE TRIGGER account_audit_ins AFTER INSERT ON %[1]s.account REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.account_audit_ins();
CREATE TRIGGER account_audit_upd AFTER UPDATE ON %[1]s.account REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.account_audit_upd();
`

// AuditMode is how the audit log is captured (see auditTableDDL).
type AuditMode string

// Audit modes. AuditAuto is resolved per cell by AuditFor.
const (
	AuditAuto      AuditMode = "auto"
	AuditRow       AuditMode = "row"
	AuditStatement AuditMode = "statement"
	AuditOff       AuditMode = "off"
)

// AuditModes lists the accepted mode names, for flags and errors.
var AuditModes = []AuditMode{AuditAuto, AuditRow, AuditStatement, AuditOff}

// ParseAuditMode accepts a mode name.
func ParseAuditMode(s string) (AuditMode, error) {
	for _, m := range AuditModes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("audit mode %q: accepted values are auto, row, statement, off", s)
}

// Describe is the mode as result files record it: the trigger and the
// table it writes ("statement-trigger, unlogged"), or "off".
func (m AuditMode) Describe() string {
	switch m {
	case AuditRow:
		return "row-trigger, unlogged"
	case AuditStatement:
		return "statement-trigger, unlogged"
	case AuditOff:
		return "off"
	}
	return string(m)
}

// SetBased is implemented by strategies whose statements change many
// accounts at once (batch): AuditFor captures their changes per statement.
type SetBased interface {
	SetBased() bool
}

// AuditFor resolves AuditAuto for st: the statement trigger for a
// set-based strategy, whose one UPDATE changes a whole batch of accounts
// (one capture instead of one per row), and the row trigger for the rest,
// whose statements change one account each (a row trigger's INSERT … VALUES
// is cheaper than a statement trigger's transition tables for one row).
func AuditFor(st Strategy, m AuditMode) AuditMode {
	if m != AuditAuto && m != "" {
		return m
	}
	if sb, ok := st.(SetBased); ok && sb.SetBased() {
		return AuditStatement
	}
	return AuditRow
}

// InstallAudit creates schema's audit log, empty, and the triggers of mode
// on its account table (AuditAuto is taken as AuditRow: resolve it with
// AuditFor first). It replaces an earlier log and triggers.
func InstallAudit(ctx context.Context, db DB, schema string, mode AuditMode) error {
	s := pgx.Identifier{schema}.Sanitize()
	ddl := fmt.Sprintf(auditTableDDL, s)
	switch mode {
	case AuditOff:
		return nil
	case AuditStatement:
		ddl += fmt.Sprintf(auditStatementDDL, s)
	default:
		ddl += fmt.Sprintf(auditRowDDL, s)
	}
	if _, err := db.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("install audit trigger (%s) in %s: %w", mode.Describe(), schema, err)
	}
	return nil
}

// AccountState is one account's final balance and version.
type AccountState struct {
	Balance, Version int64
}

// Transition is one audited change of an account. Snapshot.Transitions
// lists each aggregate's changes in commit order.
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
	// Version 0 marks history loaded before the run (Prefill), not events.
	if err := each(ctx, db, "SELECT source, event_id FROM "+s+".inbox WHERE consumer = $1 AND aggregate_version > 0", []any{&src, &id},
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
	var alive bool
	if err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s+".account_audit WHERE seq = 0)").Scan(&alive); err != nil {
		return nil, fmt.Errorf("checker: read the audit log of %s: %w (was the audit trigger installed?)", schema, err)
	}
	if !alive {
		return nil, fmt.Errorf("checker: the audit log of %s lost its sentinel row: the server crashed during the cell and emptied the unlogged log, so the transitions are gone; run the cell again", schema)
	}
	var t Transition
	err := each(ctx, db, "SELECT t.a, t.ov, t.nv, t.ob, t.nb FROM "+s+".account_audit l, "+
		"unnest(l.aggregate_id, l.old_version, l.new_version, l.old_balance, l.new_balance) AS t(a, ov, nv, ob, nb) ORDER BY l.seq",
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
