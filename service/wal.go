package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/inbox"
)

// Observer decodes the service's effects table from the write-ahead log,
// through a temporary logical replication slot (test_decoding) on a
// connection of its own: every change committed after StartObserver is
// read, with its commit time, by Poll. Logical decoding emits
// transactions in commit order and each one's changes in order, the
// order the checker needs, and nothing of it runs inside the service's
// transactions. It needs wal_level=logical and a role allowed to
// replicate (inbox.CheckWALAudit says what is missing).
type Observer struct {
	conn    *pgx.Conn
	slot    string
	dec     *decoder
	history *History
}

// slotTimeout bounds the slot's creation, which waits for the
// transactions running at that moment to end.
const slotTimeout = time.Minute

// StartObserver creates the slot for schema's effects table.
func StartObserver(ctx context.Context, connString, schema string, e Effects) (*Observer, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("observe %s: %w", e.Table, err)
	}
	cfg.RuntimeParams["application_name"] = "inboxbench-observe"
	// Commit times are read back as text: one zone, one style.
	cfg.RuntimeParams["timezone"] = "UTC"
	cfg.RuntimeParams["datestyle"] = "ISO"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("observe %s: %w", e.Table, err)
	}
	o := &Observer{conn: conn, slot: slotName(schema), dec: newDecoder(schema, e), history: NewHistory()}
	err = inbox.CheckWALAudit(ctx, conn)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, slotTimeout)
		_, err = conn.Exec(cctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)", o.slot)
		cancel()
		if err != nil {
			err = fmt.Errorf("observe %s: create slot %s (it waits for the transactions running now to end, at most %s): %w", e.Table, o.slot, slotTimeout, err)
		}
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return o, nil
}

// slotName derives the slot's name from the schema's (63 bytes at most).
func slotName(schema string) string {
	n := "ib_observe_" + strings.ToLower(schema)
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// Poll decodes what committed since the last Poll and returns the
// versions that took effect for the first time.
func (o *Observer) Poll(ctx context.Context) ([]Effect, error) {
	rows, err := o.conn.Query(ctx, `SELECT xid::text::bigint, data
		FROM pg_logical_slot_get_changes($1, NULL, NULL, 'include-timestamp', '1', 'skip-empty-xacts', '1')
		WHERE starts_with(data, $2) OR starts_with(data, 'COMMIT')`, o.slot, o.dec.prefix)
	if err != nil {
		return nil, o.decodeErr(err)
	}
	var xid int64
	var data string
	var effects []Effect
	var lineErr error
	_, err = pgx.ForEachRow(rows, []any{&xid, &data}, func() error {
		cs, err := o.dec.line(uint32(xid), data)
		if err != nil {
			if lineErr == nil {
				lineErr = err
			}
			return nil
		}
		effects = append(effects, o.history.Add(cs)...)
		return nil
	})
	if err != nil {
		return nil, o.decodeErr(err)
	}
	if lineErr != nil {
		return effects, fmt.Errorf("observe: %w", lineErr)
	}
	return effects, nil
}

func (o *Observer) decodeErr(err error) error {
	var msg string
	if errors.As(err, new(interface{ SQLState() string })) && strings.Contains(err.Error(), "XX000") {
		msg = " (PostgreSQL could not decode the WAL written meanwhile; other sessions' DDL in this database can cause it: rerun the cell)"
	}
	return fmt.Errorf("observe: decode slot %s: %w%s", o.slot, err, msg)
}

// History is what the observer decoded so far.
func (o *Observer) History() *History { return o.history }

// Close drops the slot (it is temporary: closing its connection does).
func (o *Observer) Close(ctx context.Context) {
	o.conn.Close(context.WithoutCancel(ctx))
}
