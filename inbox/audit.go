package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/external"
)

// The checker judges a cell from what the inbox's tables hold afterwards:
// this file installs the observer it relies on and reads the snapshot it
// judges. The judging itself needs no database (runner.Judge).

// The audit log is what lets the checker see transitions (v1→v3 is a gap;
// v3→v2 is stale; two changes to v2 are a duplicate) that the final state
// hides. Triggers on the business table, owned by the harness rather than
// the strategy under test, write every new state of an account into
// account_audit (aggregate, version, balance), in order of seq; the
// transition each row stands for is read back from the account's previous
// row (ReadSnapshot).
//
// What it costs is part of every audited figure, so it is built to be
// cheap (measured per statement, finely interleaved: docs/measurements.md,
// "The audit's cost per statement"):
//
//   - A statement trigger on the NEW TABLE only: one INSERT … SELECT per
//     statement however many accounts it changed, and no join of old and
//     new rows. The old state is the account's previous log row (or none:
//     balance and version 0, as an account starts). That is exact because
//     every change of an account is logged, in its commit order.
//   - No WHEN clause and no filtering in the trigger (a WHEN clause is
//     prepared again for every statement: it cost more than the INSERT);
//     a row that changed nothing is skipped when the log is read.
//   - An UNLOGGED table: no WAL, so nothing of it adds to the commit's
//     flush. A server crash empties an unlogged table at recovery; a
//     sentinel row (seq 0) written at install tells ReadSnapshot, which
//     then refuses to judge instead of reporting every effect lost. A cell
//     whose server crashed measured nothing worth keeping anyway; the
//     business tables, which are logged, are untouched by this choice.
//     A cell that fails PostgreSQL over to its standby on purpose keeps
//     its log in a logged table instead (AuditLogged): a standby has no
//     unlogged rows to promote.
//   - No index: seq orders the log when it is read, once, after the cell.
//
// Order: the checker needs each aggregate's changes in commit order
// (runner.Judge folds them per aggregate; the order between aggregates only
// picks which examples are shown). An AFTER trigger runs inside the
// changing transaction, while it holds the account's row lock, so the next
// change of that account (which waits for the lock, hence for the commit)
// always draws a later seq; a rolled-back change takes its log row with
// it. One statement changes a row at most once.
//
// AuditRow, a plain row trigger writing the same rows, is kept for
// comparison (bench calibrate-db --ab-audit row): it costs about as much
// as the statement trigger for one row and four times as much per row of a
// batch.
const auditTableDDL = `
DROP TRIGGER IF EXISTS account_audit ON %[1]s.account;
DROP TRIGGER IF EXISTS account_audit_ins ON %[1]s.account;
DROP TRIGGER IF EXISTS account_audit_upd ON %[1]s.account;
DROP TABLE IF EXISTS %[1]s.account_audit;
CREATE %[2]s TABLE %[1]s.account_audit (
    seq          bigserial,
    aggregate_id text   NOT NULL,
    version      bigint NOT NULL,
    balance      bigint NOT NULL
);
INSERT INTO %[1]s.account_audit VALUES (0, '', 0, 0);
`

// auditStatementDDL: one INSERT per statement, from its NEW TABLE. An
// INSERT … ON CONFLICT DO UPDATE fires both triggers, each with the rows
// it inserted or updated. (Transition tables allow one event per trigger.)
const auditStatementDDL = `
CREATE OR REPLACE FUNCTION %[1]s.account_audit_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO %[1]s.account_audit (aggregate_id, version, balance) SELECT n.id, n.version, n.balance FROM new_rows n;
    RETURN NULL;
END $$;
CREATE TRIGGER account_audit_ins AFTER INSERT ON %[1]s.account REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.account_audit_stmt();
CREATE TRIGGER account_audit_upd AFTER UPDATE ON %[1]s.account REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.account_audit_stmt();
`

// auditRowDDL: one INSERT per changed row.
const auditRowDDL = `
CREATE OR REPLACE FUNCTION %[1]s.account_audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO %[1]s.account_audit (aggregate_id, version, balance) VALUES (NEW.id, NEW.version, NEW.balance);
    RETURN NULL;
END $$;
CREATE TRIGGER account_audit AFTER INSERT OR UPDATE ON %[1]s.account
    FOR EACH ROW EXECUTE FUNCTION %[1]s.account_audit_row();
`

// AuditMode is how the audit log is captured (see auditTableDDL).
type AuditMode string

// Audit modes. AuditAuto is resolved per cell by ResolveAudit.
const (
	AuditAuto      AuditMode = "auto" // wal where the server can decode it, else statement
	AuditWAL       AuditMode = "wal"  // logical decoding (auditwal.go)
	AuditStatement AuditMode = "statement"
	AuditRow       AuditMode = "row"
	// AuditLogged is the statement trigger writing a logged table: its
	// rows reach the standby with the business tables' and survive a
	// PostgreSQL failover, which empties an unlogged table and drops a
	// logical slot. It costs the log's WAL in every commit; the runner
	// chooses it for cells that fail the database over.
	AuditLogged AuditMode = "logged"
	AuditOff    AuditMode = "off"
)

// AuditModes lists the accepted mode names, for flags and errors.
var AuditModes = []AuditMode{AuditAuto, AuditWAL, AuditStatement, AuditRow, AuditLogged, AuditOff}

// ResolveAudit turns AuditAuto ("" too) into AuditWAL when the server can
// decode its WAL (CheckWALAudit), else AuditStatement; other modes are
// returned as they are.
func ResolveAudit(ctx context.Context, db DB, m AuditMode) AuditMode {
	if m != AuditAuto && m != "" {
		return m
	}
	if CheckWALAudit(ctx, db) == nil {
		return AuditWAL
	}
	return AuditStatement
}

// ParseAuditMode accepts a mode name.
func ParseAuditMode(s string) (AuditMode, error) {
	for _, m := range AuditModes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("audit mode %q: accepted values are auto, wal, statement, row, logged, off", s)
}

// Describe is the mode as result files record it: the trigger and the
// table it writes ("statement-trigger, unlogged"; "statement-trigger,
// logged" survives a failover), or "off".
func (m AuditMode) Describe() string {
	switch m {
	case AuditStatement:
		return "statement-trigger, unlogged"
	case AuditRow:
		return "row-trigger, unlogged"
	case AuditWAL:
		return "wal-decoding, unlogged"
	case AuditLogged:
		return "statement-trigger, logged"
	}
	return string(m)
}

// InstallAudit creates schema's audit log, empty, and the triggers of mode
// (AuditStatement, AuditRow, or AuditLogged: the statement trigger into a
// logged table) on its account table. It replaces an
// earlier log and triggers. AuditOff installs nothing; AuditWAL needs a
// slot, not triggers: StartWALAudit.
func InstallAudit(ctx context.Context, db DB, schema string, mode AuditMode) error {
	switch mode {
	case AuditOff:
		return nil
	case AuditWAL, AuditAuto, "":
		return fmt.Errorf("install audit in %s: mode %q installs no trigger (ResolveAudit, then StartWALAudit for wal)", schema, mode)
	}
	s := pgx.Identifier{schema}.Sanitize()
	persistence := "UNLOGGED"
	if mode == AuditLogged {
		persistence = ""
	}
	ddl := fmt.Sprintf(auditTableDDL, s, persistence)
	if mode == AuditRow {
		ddl += fmt.Sprintf(auditRowDDL, s)
	} else {
		ddl += fmt.Sprintf(auditStatementDDL, s)
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
	// NoInbox says the consumer keeps no dedup records the checker can
	// read (a service whose spec has no inbox query): the rules that
	// compare effects with inbox rows do not apply.
	NoInbox bool
	Parked  map[string]bool // keys still parked for the consumer
	// Audited says whether the audit trigger ran for the whole cell;
	// Transitions is empty without it.
	Audited     bool
	Transitions []Transition
	// Unfinished are the consumer's external operations left in flight,
	// by event key, each with what became of it: a PROCESSING or STUCK
	// operation (ext-lease), an outbox row never sent (ext-outbox).
	Unfinished map[string]string
	// External is the external service's call log of the cell; the runner
	// attaches it for a strategy that calls the service (nil: the checker
	// judges the database alone).
	External *external.Log
}

// ReadSnapshot reads the accounts, the consumer's inbox and parked keys
// and, with audited, the audit log of schema.
func ReadSnapshot(ctx context.Context, db DB, schema, consumer string, audited bool) (*Snapshot, error) {
	r := snapshotReader{db: db, s: pgx.Identifier{schema}.Sanitize(), consumer: consumer}
	s := r.s
	snap := &Snapshot{Accounts: map[string]AccountState{}, Inbox: map[string]bool{}, Parked: map[string]bool{}, Audited: audited}
	var id, src string
	var st AccountState
	if err := r.each(ctx, "SELECT id, balance, version FROM "+s+".account", rowScan{[]any{&id, &st.Balance, &st.Version},
		func() { snap.Accounts[id] = st }}); err != nil {
		return nil, err
	}
	// Version 0 marks history loaded before the run (Prefill), not events.
	if err := r.each(ctx, "SELECT source, event_id FROM "+s+".inbox WHERE consumer = $1 AND aggregate_version > 0", rowScan{[]any{&src, &id},
		func() { snap.Inbox[src+" "+id] = true }}, consumer); err != nil {
		return nil, err
	}
	if err := r.each(ctx, "SELECT source, event_id FROM "+s+".parked WHERE consumer = $1", rowScan{[]any{&src, &id},
		func() { snap.Parked[src+" "+id] = true }}, consumer); err != nil {
		return nil, err
	}
	if err := r.unfinished(ctx, snap); err != nil {
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
		return nil, fmt.Errorf("checker: the audit log of %s lost its sentinel row: the server crashed or failed over during the cell and emptied the unlogged log, so the transitions are gone; run the cell again (a cell that fails PostgreSQL over needs the logged audit, --audit logged)", schema)
	}
	// Each row is an account's new state; the transition starts from its
	// previous row (none: an account starts at version 0, balance 0).
	last := map[string]AccountState{}
	var agg string
	var now AccountState
	err := r.each(ctx, "SELECT aggregate_id, version, balance FROM "+s+".account_audit WHERE seq > 0 ORDER BY seq",
		rowScan{[]any{&agg, &now.Version, &now.Balance}, func() {
			was := last[agg]
			if was == now {
				return // a row written unchanged, or created at (id, 0, 0) to be locked
			}
			last[agg] = now
			snap.Transitions = append(snap.Transitions, Transition{Aggregate: agg,
				OldVersion: was.Version, NewVersion: now.Version, OldBalance: was.Balance, NewBalance: now.Balance})
		}})
	if err != nil {
		return nil, fmt.Errorf("%w (was the audit trigger installed?)", err)
	}
	return snap, nil
}

// snapshotReader is where ReadSnapshot reads: the database, the schema
// (quoted) and the consumer.
type snapshotReader struct {
	db       DB
	s        string
	consumer string
}

// unfinished fills snap.Unfinished from the external strategies' tables
// (migration 0003).
func (r snapshotReader) unfinished(ctx context.Context, snap *Snapshot) error {
	s, consumer := r.s, r.consumer
	snap.Unfinished = map[string]string{}
	var src, id, state string
	var takeovers int
	if err := r.each(ctx, "SELECT source, event_id, state, attempts FROM "+s+".external_op WHERE consumer = $1 AND state <> 'DONE'",
		rowScan{[]any{&src, &id, &state, &takeovers}, func() {
			snap.Unfinished[src+" "+id] = fmt.Sprintf("left %s after %d attempt(s)", state, takeovers)
		}}, consumer); err != nil {
		return err
	}
	return r.each(ctx, "SELECT source, event_id, attempts FROM "+s+".outbox WHERE consumer = $1 AND sent_at IS NULL",
		rowScan{[]any{&src, &id, &takeovers}, func() {
			snap.Unfinished[src+" "+id] = fmt.Sprintf("outbox row never sent (%d attempt(s) recorded)", takeovers)
		}}, consumer)
}

// ParkedCount counts the consumer's parked events in schema.
func ParkedCount(ctx context.Context, db DB, schema, consumer string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".parked WHERE consumer = $1", consumer).Scan(&n)
	return n, err
}

// rowScan is where each row goes: scanned into dst, then handed to then.
type rowScan struct {
	dst  []any
	then func()
}

// each scans every row of sql into to.
func (r snapshotReader) each(ctx context.Context, sql string, to rowScan, args ...any) error {
	rows, err := r.db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("checker: %s: %w", sql, err)
	}
	_, err = pgx.ForEachRow(rows, to.dst, func() error { to.then(); return nil })
	if err != nil {
		return fmt.Errorf("checker: %s: %w", sql, err)
	}
	return nil
}
