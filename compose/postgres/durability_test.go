package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
	"github.com/inboxbench/inboxbench/results"
)

// PostgreSQL commits asynchronously only under the os profile, so a
// running server is restarted only between os and the others.
func TestDurabilityProfilesRenderSettings(t *testing.T) {
	for profile, want := range map[string]string{compose.DurabilityStock: "on", compose.DurabilityFsync: "on", compose.DurabilityOS: "off"} {
		e := &compose.Env{Dir: t.TempDir(), Cfg: config.Default(), Durability: profile}
		if got := pgSynchronousCommit(compose.StartProfile(e, &Service{})); got != want {
			t.Errorf("%s: synchronous_commit=%s, want %s", profile, got, want)
		}
	}
	for _, s := range []compose.DurabilityAware{&Service{}, &Cluster{}, &Secure{}} {
		if s.DurabilitySettings(compose.DurabilityStock) != s.DurabilitySettings(compose.DurabilityFsync) ||
			s.DurabilitySettings(compose.DurabilityStock) == s.DurabilitySettings(compose.DurabilityOS) {
			t.Errorf("%T: settings stock %q, fsync %q, os %q; want stock and fsync alike, os apart", s,
				s.DurabilitySettings(compose.DurabilityStock), s.DurabilitySettings(compose.DurabilityFsync), s.DurabilitySettings(compose.DurabilityOS))
		}
	}
}

// durability reads the server's settings and gives a verdict.
func TestPostgresDurability(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := durability(ctx, cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"fsync", "synchronous_commit", "wal_sync_method", "fsync before confirm"} {
		if m[k] == "" {
			t.Errorf("durability lacks %s: %v", k, m)
		}
	}
	if m["fsync"] == "on" && m["synchronous_commit"] == "on" && !strings.HasPrefix(m["fsync before confirm"], "yes") {
		t.Errorf("fsync=on, synchronous_commit=on, yet the verdict is %q", m["fsync before confirm"])
	}
}

// FillDurability puts PostgreSQL's settings and the profile into a
// result's environment.
func TestFillDurability(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	e := &compose.Env{Dir: t.TempDir(), Cfg: cfg}
	var env results.Env
	compose.FillDurability(ctx, e, &env)
	if env.Durability == nil || env.Durability.Settings[results.DurabilityPostgres]["synchronous_commit"] == "" || env.Durability.Profile == "" {
		t.Errorf("FillDurability left %+v", env.Durability)
	}
}
