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
	"io/fs"
	"os"
	"strings"

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

// DurabilityAware is implemented by services whose configuration depends
// on the profile: DurabilitySettings names what a profile sets, and a
// running service is restarted when the new profile's settings differ.
type DurabilityAware interface {
	DurabilitySettings(profile string) string
}

// DurabilityReporter is implemented by services whose servers' durability
// a run records beside the brokers' (PostgreSQL's: what a COMMIT means);
// the brokers' come from their drivers (brokers.DurabilityOf). The map is
// what result.json shows; a server that cannot be asked returns an error
// with what it could read.
type DurabilityReporter interface {
	ReportDurability(ctx context.Context, e *Env) (map[string]string, error)
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

// StartProfile is the profile a Start uses: the one asked for, else the
// one recorded, else stock.
func StartProfile(e *Env, s Service) string {
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
	if d, ok := s.(DurabilityAware); ok && d.DurabilitySettings(from) != d.DurabilitySettings(e.Durability) {
		return from, true
	}
	// Same configuration under both profiles: just record the new name.
	_ = recordDurability(e, s, e.Durability)
	return from, false
}

// StackDurability is the profile of the stack: the one every service
// recorded, "mixed (…)" when they differ, "" when none recorded one.
func StackDurability(e *Env) string { return stackDurability(e, Services(e.Variant)) }

// stackDurability is StackDurability of the services svcs.
func stackDurability(e *Env, svcs []Service) string {
	seen := map[string][]string{}
	var order []string
	for _, s := range svcs {
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

// FillDurability records in env what the stack's servers that are no
// broker say of their durability (DurabilityReporter: PostgreSQL's
// COMMIT, from the server at e.Cfg.PGURL) and the stack's durability
// profile, for a run's result.json. A server that cannot be asked is
// recorded as an error entry rather than failing the run. The brokers'
// entries come from their drivers:
// env.AddDurability(name, brokers.DurabilityOf(ctx, b, topic)).
func FillDurability(ctx context.Context, e *Env, env *results.Env) {
	for _, s := range Services(e.Variant) {
		r, ok := s.(DurabilityReporter)
		if !ok {
			continue
		}
		m, err := r.ReportDurability(ctx, e)
		if err != nil {
			if m == nil {
				m = map[string]string{}
			}
			m["error"] = err.Error()
		}
		env.AddDurability(s.Name(), m)
	}
	if env.Durability == nil {
		env.Durability = &results.Durability{}
	}
	env.Durability.Profile = StackDurability(e)
}
