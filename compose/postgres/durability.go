package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
)

// ReportDurability implements compose.DurabilityReporter: what a COMMIT
// means on the server at the configured URL (durability).
func (*Service) ReportDurability(ctx context.Context, e *compose.Env) (map[string]string, error) {
	return durability(ctx, e.Cfg.PGURL)
}

// durability reads the settings that decide what a COMMIT means
// on the server at url (SHOW …), with the verdict under "fsync before
// confirm" like the broker drivers' reports.
func durability(ctx context.Context, url string) (map[string]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	out := map[string]string{}
	for _, k := range []string{"fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "synchronous_standby_names"} {
		var v string
		if err := conn.QueryRow(ctx, "SHOW "+k).Scan(&v); err != nil {
			return out, fmt.Errorf("postgres: SHOW %s: %w", k, err)
		}
		if v == "" {
			v = "unset"
		}
		out[k] = v
	}
	out["standbys"], out[brokers.ReplicatedKey] = pgReplication(ctx, conn, out)
	switch {
	case out["fsync"] != "on":
		out["fsync before confirm"] = "no: fsync=off (a crash can corrupt the cluster)"
	case out["synchronous_commit"] == "off":
		out["fsync before confirm"] = "no: synchronous_commit=off returns before the WAL is flushed (a crash loses the last commits, never corrupts)"
	default:
		out["fsync before confirm"] = "yes: COMMIT returns after its WAL was flushed (" + out["wal_sync_method"] + ")"
	}
	return out, nil
}

// pgReplication reads the server's standbys (pg_stat_replication: name,
// state, sync state) and says whether a COMMIT waits for one of them.
func pgReplication(ctx context.Context, conn *pgx.Conn, show map[string]string) (standbys, verdict string) {
	rows, err := conn.Query(ctx, "SELECT application_name, state, sync_state FROM pg_stat_replication ORDER BY application_name")
	var list []string
	if err == nil {
		for rows.Next() {
			var app, state, sync string
			if rows.Scan(&app, &state, &sync) == nil {
				list = append(list, fmt.Sprintf("%s %s (%s)", app, state, sync))
			}
		}
		rows.Close()
	}
	standbys = strings.Join(list, ", ")
	if standbys == "" {
		standbys = "none"
	}
	names, commit := show["synchronous_standby_names"], show["synchronous_commit"]
	switch {
	case len(list) == 0:
		return standbys, "no: no standby streams from this server"
	case names == "unset" || names == "":
		return standbys, "no: asynchronous replication (synchronous_standby_names is empty): a COMMIT returns before a standby has its WAL"
	case commit == "off" || commit == "local":
		return standbys, "no: synchronous_commit=" + commit + " does not wait for the synchronous standby"
	}
	return standbys, fmt.Sprintf("yes: a COMMIT returns once the synchronous standby %s has its WAL (synchronous_commit=%s)", names, commit)
}
