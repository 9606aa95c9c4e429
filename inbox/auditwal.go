package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditWAL reads the account table's changes from the write-ahead log the
// server writes anyway, through a logical replication slot decoded with
// test_decoding, instead of triggers: nothing of the audit runs inside the
// measured transactions. The slot is created before the stream and read
// once after it, into the same account_audit table the triggers write, so
// ReadSnapshot and the checker are unchanged. Logical decoding emits
// transactions in commit order and each one's changes in order: the order
// the checker needs.
//
// It needs wal_level=logical (the local stack sets it) and a role allowed
// to replicate; CheckWALAudit says what is missing. The slot is temporary:
// it lives as long as the WALAudit's own connection, so a bench process
// that dies leaves no slot holding WAL back.
type WALAudit struct {
	conn   *pgx.Conn
	schema string
	slot   string
}

// walSlotTimeout bounds the slot's creation, which waits for the
// transactions running at that moment to end.
const walSlotTimeout = time.Minute

// CheckWALAudit reports why the server cannot decode the audit from its
// WAL (nil when it can).
func CheckWALAudit(ctx context.Context, db DB) error {
	var level string
	var replicate bool
	err := db.QueryRow(ctx, `SELECT current_setting('wal_level'),
		(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)`).Scan(&level, &replicate)
	switch {
	case err != nil:
		return fmt.Errorf("audit wal: %w", err)
	case level != "logical":
		return fmt.Errorf("audit wal needs wal_level=logical, and the server runs with %s: set it (a restart) or use --audit statement", level)
	case !replicate:
		return errors.New("audit wal needs a role allowed to replicate: ALTER ROLE … REPLICATION, or use --audit statement")
	}
	return nil
}

// StartWALAudit creates schema's audit log (empty, no trigger) and a
// temporary logical slot on a connection of its own (connString): every
// change committed from now on is decoded by Finish.
func StartWALAudit(ctx context.Context, connString, schema string) (*WALAudit, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("audit wal: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "inboxbench-audit"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("audit wal: %w", err)
	}
	w := &WALAudit{conn: conn, schema: schema, slot: walSlotName(schema)}
	err = CheckWALAudit(ctx, conn)
	if err == nil {
		_, err = conn.Exec(ctx, fmt.Sprintf(auditTableDDL, pgx.Identifier{schema}.Sanitize()))
	}
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, walSlotTimeout)
		_, err = conn.Exec(cctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)", w.slot)
		cancel()
		if err != nil {
			err = fmt.Errorf("audit wal: create slot %s (it waits for the transactions running now to end, at most %s): %w", w.slot, walSlotTimeout, err)
		}
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return w, nil
}

// walSlotName derives the slot's name from the schema's (63 bytes at
// most, as PostgreSQL allows).
func walSlotName(schema string) string {
	n := "ib_audit_" + strings.ToLower(schema)
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// walChange matches test_decoding's line for a change of the account
// table: table ib_x.account: UPDATE: id[text]:'acct-000001' balance[bigint]:10 version[bigint]:2
const walChange = `^table [^ ]+: (INSERT|UPDATE): id\[text\]:'((?:[^']|'')*)' balance\[bigint\]:(-?[0-9]+) version\[bigint\]:(-?[0-9]+)$`

// Finish decodes every change committed since the slot was created into
// the audit log, in commit order, and closes the slot. A change of the
// account table it cannot read (a strategy that added columns to it) is
// an error: the log would miss a transition.
func (w *WALAudit) Finish(ctx context.Context) error {
	defer w.conn.Close(context.WithoutCancel(ctx))
	s := pgx.Identifier{w.schema}.Sanitize()
	var unread int64
	var example string
	err := w.conn.QueryRow(ctx, `WITH c AS (
			SELECT data, ord FROM pg_logical_slot_get_changes($1, NULL, NULL, 'skip-empty-xacts', '1') WITH ORDINALITY AS t(lsn, xid, data, ord)
			WHERE starts_with(data, 'table ' || quote_ident($2) || '.account: ') AND (strpos(data, ': INSERT: ') > 0 OR strpos(data, ': UPDATE: ') > 0)
		), m AS (
			SELECT ord, data, regexp_match(data, $3) AS f FROM c
		), ins AS (
			INSERT INTO `+s+`.account_audit (seq, aggregate_id, version, balance)
			SELECT ord, replace(f[2], '''''', ''''), f[4]::bigint, f[3]::bigint FROM m WHERE f IS NOT NULL
		)
		SELECT count(*), coalesce(min(data), '') FROM m WHERE f IS NULL`, w.slot, w.schema, walChange).Scan(&unread, &example)
	if err != nil {
		if pgCode(err) == "XX000" {
			// Seen once in CI with test packages creating and dropping
			// schemas in the same database while the slot was open; the
			// change PostgreSQL could not map was not necessarily ours.
			return fmt.Errorf("audit wal: decode slot %s: %w (PostgreSQL could not decode the WAL written while the cell ran; other sessions' DDL in this database can cause it: rerun the cell, or use --audit statement)", w.slot, err)
		}
		return fmt.Errorf("audit wal: decode slot %s: %w", w.slot, err)
	}
	if unread > 0 {
		return fmt.Errorf("audit wal: %d changes of %s.account could not be read from the WAL (e.g. %q): use --audit statement", unread, w.schema, example)
	}
	return nil
}

// Close drops the slot without decoding (the cell ended early).
func (w *WALAudit) Close(ctx context.Context) {
	w.conn.Close(context.WithoutCancel(ctx))
}
