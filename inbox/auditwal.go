package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	seq    int64 // the last seq written to the log
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
		return fmt.Errorf("audit wal needs wal_level=logical, and the server runs with %s: set it (a restart) or use the statement audit mode", level)
	case !replicate:
		return errors.New("audit wal needs a role allowed to replicate: ALTER ROLE … REPLICATION, or use the statement audit mode")
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
		_, err = conn.Exec(ctx, fmt.Sprintf(auditTableDDL, pgx.Identifier{schema}.Sanitize(), "UNLOGGED"))
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

// parseWALChange reads test_decoding's line for a change of the account
// table (table ib_x.account: UPDATE: id[text]:'acct-000001' balance[bigint]:10 version[bigint]:2);
// ok is false for any other shape (a strategy that added columns to the
// table). It is plain string work: a regular expression in SQL cost 25 µs
// a line, more than decoding the WAL.
func parseWALChange(line string) (id string, balance, version int64, ok bool) {
	const idAt, balAt, verAt = ": id[text]:'", "' balance[bigint]:", " version[bigint]:"
	i := strings.Index(line, idAt)
	j := strings.LastIndex(line, balAt)
	k := strings.LastIndex(line, verAt)
	if i < 0 || j < i+len(idAt) || k < j+len(balAt) {
		return "", 0, 0, false
	}
	var err1, err2 error
	balance, err1 = strconv.ParseInt(line[j+len(balAt):k], 10, 64)
	version, err2 = strconv.ParseInt(line[k+len(verAt):], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	id = line[i+len(idAt) : j]
	if strings.Contains(id, "'") { // quotes inside come doubled
		if strings.Contains(strings.ReplaceAll(id, "''", ""), "'") {
			return "", 0, 0, false
		}
		id = strings.ReplaceAll(id, "''", "'")
	}
	return id, balance, version, true
}

// Finish decodes every change committed since the slot was created into
// the audit log, in commit order, and closes the slot. A change of the
// account table it cannot read (a strategy that added columns to it) is
// an error: the log would miss a transition.
func (w *WALAudit) Finish(ctx context.Context) error {
	defer w.conn.Close(context.WithoutCancel(ctx))
	return w.Flush(ctx)
}

// Flush decodes the changes committed since the last Flush (or since the
// slot was created) into the audit log and keeps the slot: a long cell
// can have its log read, and judged, a part at a time.
func (w *WALAudit) Flush(ctx context.Context) error {
	rows, err := w.conn.Query(ctx, `SELECT ord, data
		FROM pg_logical_slot_get_changes($1, NULL, NULL, 'skip-empty-xacts', '1') WITH ORDINALITY AS t(lsn, xid, data, ord)
		WHERE starts_with(data, 'table ' || quote_ident($2) || '.account: ') AND (strpos(data, ': INSERT: ') > 0 OR strpos(data, ': UPDATE: ') > 0)`,
		w.slot, w.schema)
	if err != nil {
		return w.decodeErr(err)
	}
	var log [][]any
	var unread, last int64
	var example string
	var ord int64
	var line string
	_, err = pgx.ForEachRow(rows, []any{&ord, &line}, func() error {
		last = max(last, ord)
		id, bal, ver, ok := parseWALChange(line)
		if !ok {
			if unread++; example == "" {
				example = line
			}
			return nil
		}
		log = append(log, []any{w.seq + ord, id, ver, bal})
		return nil
	})
	if err != nil {
		return w.decodeErr(err)
	}
	if unread > 0 {
		return fmt.Errorf("audit wal: %d changes of %s.account could not be read from the WAL (e.g. %q): use the statement audit mode", unread, w.schema, example)
	}
	if _, err := w.conn.CopyFrom(ctx, pgx.Identifier{w.schema, "account_audit"}, []string{"seq", "aggregate_id", "version", "balance"}, pgx.CopyFromRows(log)); err != nil {
		return fmt.Errorf("audit wal: write the log of %s: %w", w.schema, err)
	}
	w.seq += last
	return nil
}

func (w *WALAudit) decodeErr(err error) error {
	if pgCode(err) == "XX000" {
		// Seen once in CI with test packages creating and dropping
		// schemas in the same database while the slot was open; the
		// change PostgreSQL could not map was not necessarily ours.
		return fmt.Errorf("audit wal: decode slot %s: %w (PostgreSQL could not decode the WAL written while the cell ran; other sessions' DDL in this database can cause it: rerun the cell, or use the statement audit mode)", w.slot, err)
	}
	return fmt.Errorf("audit wal: decode slot %s: %w", w.slot, err)
}

// Close drops the slot without decoding (the cell ended early).
func (w *WALAudit) Close(ctx context.Context) {
	w.conn.Close(context.WithoutCancel(ctx))
}
