package service

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/inbox"
)

// Snapshot reads what the checker judges of a service's cell: the final
// state through the spec's effects query and, when the spec has one, the
// consumer's dedup records through its inbox query, both with search_path
// set to the cell's schema; the transitions are the observer's history.
// key maps an event id to the event's identity key ("source id"), for an
// inbox query that returns no source; unknown ids keep the source they
// came with, or none.
func Snapshot(ctx context.Context, db inbox.DB, s *Spec, schema, consumer string, h *History, key func(id string) string) (*inbox.Snapshot, error) {
	snap := &inbox.Snapshot{Accounts: map[string]inbox.AccountState{}, Inbox: map[string]bool{}, Parked: map[string]bool{},
		Audited: true, Transitions: h.Transitions(), NoInbox: s.Inbox == nil}
	err := inSchema(ctx, db, schema, func(tx pgx.Tx) error {
		if err := readState(ctx, tx, s.Effects.Query, snap); err != nil {
			return err
		}
		if s.Inbox == nil {
			return nil
		}
		return readInbox(ctx, tx, s.Inbox.Query, consumer, key, snap)
	})
	return snap, err
}

// inSchema runs f in a read-only transaction whose search_path is the
// cell's schema.
func inSchema(ctx context.Context, db inbox.DB, schema string, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		return f(tx)
	})
}

func readState(ctx context.Context, tx pgx.Tx, query string, snap *inbox.Snapshot) error {
	rows, err := tx.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("effects.query: %w", err)
	}
	var agg string
	var st inbox.AccountState
	_, err = pgx.ForEachRow(rows, []any{&agg, &st.Balance, &st.Version}, func() error {
		snap.Accounts[agg] = st
		return nil
	})
	if err != nil {
		return fmt.Errorf("effects.query must return (aggregate text, state bigint, version bigint): %w", err)
	}
	return nil
}

func readInbox(ctx context.Context, tx pgx.Tx, query, consumer string, key func(string) string, snap *inbox.Snapshot) error {
	rows, err := tx.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("inbox.query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return fmt.Errorf("inbox.query: %w", err)
		}
		var c, src, id string
		switch len(vals) {
		case 2:
			c, id = fmt.Sprint(vals[0]), fmt.Sprint(vals[1])
			src = ""
		case 3:
			c, src, id = fmt.Sprint(vals[0]), fmt.Sprint(vals[1]), fmt.Sprint(vals[2])
		default:
			return fmt.Errorf("inbox.query returns %d columns: it must return (consumer, event_id) or (consumer, source, event_id)", len(vals))
		}
		if c != consumer {
			continue
		}
		k := src + " " + id
		if src == "" {
			k = key(id)
		}
		snap.Inbox[k] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("inbox.query: %w", err)
	}
	return nil
}
