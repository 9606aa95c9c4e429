package compose

// Durability profiles of the native stack: what a broker's confirm and a
// PostgreSQL commit mean, chosen at `bench stack up --durability`.
//
//   - stock (the default): each server as it ships. Kafka and RocketMQ
//     confirm from the page cache (no fsync: Kafka relies on replication,
//     RocketMQ ASYNC_FLUSH flushes every 500 ms); RabbitMQ quorum queues
//     and PostgreSQL (fsync=on, synchronous_commit=on) fsync before they
//     confirm/commit. This is what `make bench` measured before profiles
//     existed.
//   - fsync: every server confirms only after the data reached disk:
//     Kafka log.flush.interval.messages=1 (fsync after every append,
//     before the produce response), RocketMQ flushDiskType=SYNC_FLUSH,
//     RabbitMQ quorum queues (always), PostgreSQL as stock.
//   - os: none waits for the disk where the server lets it: Kafka and
//     RocketMQ as stock; PostgreSQL synchronous_commit=off (a commit
//     returns before its WAL is flushed; fsync stays on, so a crash loses
//     the last few hundred ms of commits but never corrupts the cluster,
//     whereas fsync=off can). RabbitMQ stays as it is: quorum queues
//     always fsync their write-ahead log before confirming, and switching
//     the driver to classic queues would change what the conformance
//     suite tests (delivery counts, at-least-once dead-lettering), not
//     just the disk writes.
//
// The profile a service was started with is recorded in
// <stack>/run/<service>.durability; `up` with another profile restarts the
// services whose configuration differs, `status` prints it.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// Durability profiles.
const (
	DurabilityStock = "stock"
	DurabilityFsync = "fsync"
	DurabilityOS    = "os"
)

// DurabilityProfiles lists the profiles, default first.
var DurabilityProfiles = []string{DurabilityStock, DurabilityFsync, DurabilityOS}

// KeyDurability names Env.Durability in errors (config.SettingError).
const KeyDurability = "compose.durability"

// CheckDurability refuses an unknown profile name; "" (keep what each
// service runs with) is accepted.
func CheckDurability(p string) error {
	if p == "" {
		return nil
	}
	for _, k := range DurabilityProfiles {
		if p == k {
			return nil
		}
	}
	return config.Invalid(KeyDurability, p, "choose one of %s", strings.Join(DurabilityProfiles, ", "))
}

// durabilityAware is implemented by services whose configuration depends
// on the profile: durabilitySettings names what a profile sets, and a
// running service is restarted when the new profile's settings differ.
type durabilityAware interface {
	durabilitySettings(profile string) string
}

func durabilityFile(e *Env, s Service) string {
	return e.Path("run", s.Name()+".durability")
}

// RecordedDurability returns the profile s was last started with by this
// stack; "" when it never was (started before profiles existed, or not by
// this stack).
func RecordedDurability(e *Env, s Service) string {
	b, err := os.ReadFile(durabilityFile(e, s))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func recordDurability(e *Env, s Service, profile string) error {
	if err := os.MkdirAll(e.Path("run"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(durabilityFile(e, s), []byte(profile+"\n"), 0o644)
}

// startProfile is the profile a Start uses: the one asked for, else the
// one recorded, else stock.
func startProfile(e *Env, s Service) string {
	if e.Durability != "" {
		return e.Durability
	}
	if p := RecordedDurability(e, s); p != "" {
		return p
	}
	return DurabilityStock
}

// needsRestart says whether a running service s must be restarted to run
// with the profile asked for, and from which profile.
func needsRestart(e *Env, s Service) (from string, restart bool) {
	if e.Durability == "" {
		return "", false
	}
	from = RecordedDurability(e, s)
	if from == "" {
		from = DurabilityStock // everything ran stock before profiles existed
	}
	if from == e.Durability {
		return from, false
	}
	if d, ok := s.(durabilityAware); ok && d.durabilitySettings(from) != d.durabilitySettings(e.Durability) {
		return from, true
	}
	// Same configuration under both profiles: just record the new name.
	_ = recordDurability(e, s, e.Durability)
	return from, false
}

// StackDurability is the profile of the stack: the one every service
// recorded, "mixed (…)" when they differ, "" when none recorded one.
func StackDurability(e *Env) string {
	seen := map[string][]string{}
	var order []string
	for _, s := range Services(e.Variant) {
		p := RecordedDurability(e, s)
		if p == "" {
			if _, err := os.Stat(durabilityFile(e, s)); errors.Is(err, fs.ErrNotExist) {
				p = DurabilityStock + " (not recorded)"
			}
		}
		if _, ok := seen[p]; !ok {
			order = append(order, p)
		}
		seen[p] = append(seen[p], s.Name())
	}
	if len(order) == 1 {
		return order[0]
	}
	var parts []string
	for _, p := range order {
		parts = append(parts, p+": "+strings.Join(seen[p], ", "))
	}
	return "mixed (" + strings.Join(parts, "; ") + ")"
}

// PostgresDurability reads the settings that decide what a COMMIT means
// on the server at url (SHOW …), with the verdict under "fsync before
// confirm" like the broker drivers' reports.
func PostgresDurability(ctx context.Context, url string) (map[string]string, error) {
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

// FillDurability records in env what a PostgreSQL commit means (from the
// server at e.Cfg.PGURL) and the stack's durability profile, for a run's
// result.json. A server that cannot be asked is recorded as an error
// entry rather than failing the run. The brokers' entries come from their
// drivers: env.AddDurability(name, brokers.DurabilityOf(ctx, b, topic)).
func FillDurability(ctx context.Context, e *Env, env *results.Env) {
	m, err := PostgresDurability(ctx, e.Cfg.PGURL)
	if err != nil {
		if m == nil {
			m = map[string]string{}
		}
		m["error"] = err.Error()
	}
	env.AddDurability(results.DurabilityPostgres, m)
	if env.Durability == nil {
		env.Durability = &results.Durability{}
	}
	env.Durability.Profile = StackDurability(e)
}
