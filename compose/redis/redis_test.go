package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/inboxbench/inboxbench/brokers/redis"
	"github.com/inboxbench/inboxbench/compose"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
)

// Each profile names its own appendfsync, so `up` with another profile
// restarts the server.
func TestDurabilitySettingsDiffer(t *testing.T) {
	s := &Service{}
	seen := map[string]string{}
	for _, p := range compose.DurabilityProfiles {
		v := s.DurabilitySettings(p)
		if other, dup := seen[v]; dup {
			t.Errorf("profiles %s and %s both set %q", other, p, v)
		}
		seen[v] = p
	}
	if s.DurabilitySettings(compose.DurabilityFsync) != "appendfsync always" {
		t.Errorf("fsync: %q", s.DurabilitySettings(compose.DurabilityFsync))
	}
}

// The running server is the one the stack started, with the stack's
// configuration: loopback, protected mode, the append-only file with the
// appendfsync of the profile it recorded, and maxmemory with noeviction.
func TestRedisRunsAsConfigured(t *testing.T) {
	cfg := testenv.Require(t, testenv.Redis)
	e := &compose.Env{Dir: testenv.StackDir(t, cfg), Cfg: cfg}
	s := &Service{}
	if _, ours := s.Procs(e)[0].PID(); !ours {
		testenv.SkipUnlessCI(t, "the Redis at "+s.Addr(e)+" was not started by the stack in "+e.Dir)
	}
	o, err := goredis.ParseURL(cfg.Get(redisbroker.SettingURL))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := map[string]string{"bind": "127.0.0.1", "protected-mode": "yes", "appendonly": "yes",
		"appendfsync": appendfsync(compose.StartProfile(e, s)), "maxmemory-policy": "noeviction", "save": ""}
	for k, v := range want {
		got, err := c.ConfigGet(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(got[k]) != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if v, err := redisbroker.Version(ctx, cfg); err != nil || !strings.HasPrefix(v, "Redis 7.") {
		t.Errorf("version %q, %v", v, err)
	}
}
