package compose

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/config"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
	"github.com/inboxbench/inboxbench/results"
)

// Each profile renders the settings it promises, and nothing else changes:
// Kafka fsyncs every append only under fsync, RocketMQ flushes
// synchronously only under fsync, PostgreSQL commits asynchronously only
// under os.
func TestDurabilityProfilesRenderSettings(t *testing.T) {
	for _, tc := range []struct {
		profile, kafkaFlush, rocketFlush, pgCommit string
	}{
		{DurabilityStock, "", "flushDiskType=ASYNC_FLUSH\n", "on"},
		{DurabilityFsync, "log.flush.interval.messages=1\n", "flushDiskType=SYNC_FLUSH\n", "on"},
		{DurabilityOS, "", "flushDiskType=ASYNC_FLUSH\n", "off"},
	} {
		e := &Env{Dir: t.TempDir(), Cfg: config.Default(), Durability: tc.profile}
		if err := (&Kafka{}).writeConfig(e); err != nil {
			t.Fatal(err)
		}
		props, _ := os.ReadFile(e.Path("kafka", "config", "server.properties"))
		if got := strings.Contains(string(props), "log.flush.interval.messages="); got != (tc.kafkaFlush != "") || (tc.kafkaFlush != "" && !strings.Contains(string(props), tc.kafkaFlush)) {
			t.Errorf("%s: kafka server.properties flush setting wrong (want %q):\n%s", tc.profile, tc.kafkaFlush, props)
		}
		if err := (&RocketMQ{}).writeConfig(e); err != nil {
			t.Fatal(err)
		}
		conf, _ := os.ReadFile(e.Path("rocketmq", "conf", "broker.conf"))
		if !strings.Contains(string(conf), tc.rocketFlush) {
			t.Errorf("%s: broker.conf lacks %q", tc.profile, tc.rocketFlush)
		}
		if got := pgSynchronousCommit(startProfile(e, &Postgres{})); got != tc.pgCommit {
			t.Errorf("%s: synchronous_commit=%s, want %s", tc.profile, got, tc.pgCommit)
		}
	}
}

// A service started under one profile is restarted for another only when
// its settings differ; without --durability nothing restarts, and a new
// service starts with the recorded profile, else stock.
func TestDurabilityRestartDecision(t *testing.T) {
	e := &Env{Dir: t.TempDir(), Cfg: config.Default()}
	k, r := &Kafka{}, &RabbitMQ{}
	if p := startProfile(e, k); p != DurabilityStock {
		t.Errorf("nothing recorded, no flag: start profile %q, want stock", p)
	}
	if _, restart := needsRestart(e, k); restart {
		t.Error("no --durability: a restart was asked for")
	}
	e.Durability = DurabilityFsync
	if from, restart := needsRestart(e, k); !restart || from != DurabilityStock {
		t.Errorf("kafka stock → fsync: restart=%v from %q, want a restart from stock", restart, from)
	}
	if _, restart := needsRestart(e, r); restart {
		t.Error("rabbitmq runs the same configuration under every profile, yet a restart was asked for")
	}
	if _, restart := needsRestart(e, &Postgres{}); restart {
		t.Error("postgres runs the same settings under stock and fsync, yet a restart was asked for")
	}
	if got := RecordedDurability(e, r); got != DurabilityFsync {
		t.Errorf("rabbitmq's profile not recorded as fsync without a restart: %q", got)
	}
	if err := recordDurability(e, k, DurabilityFsync); err != nil {
		t.Fatal(err)
	}
	if _, restart := needsRestart(e, k); restart {
		t.Error("kafka already runs fsync: a restart was asked for")
	}
	e.Durability = ""
	if p := startProfile(e, k); p != DurabilityFsync {
		t.Errorf("no flag: kafka would start with %q, want its recorded fsync", p)
	}
	if err := CheckDurability("sync"); err == nil || !strings.Contains(err.Error(), "stock, fsync, os") {
		t.Errorf("CheckDurability(sync) = %v, want the profiles named", err)
	}
	if got := StackDurability(e); !strings.HasPrefix(got, "mixed (") {
		t.Errorf("StackDurability with kafka and rabbitmq at fsync, the others unrecorded = %q, want mixed", got)
	}
}

// PostgresDurability reads the server's settings and gives a verdict.
func TestPostgresDurability(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := PostgresDurability(ctx, cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"fsync", "synchronous_commit", "wal_sync_method", "fsync before confirm"} {
		if m[k] == "" {
			t.Errorf("PostgresDurability lacks %s: %v", k, m)
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
	e := &Env{Dir: t.TempDir(), Cfg: cfg}
	var env results.Env
	FillDurability(ctx, e, &env)
	if env.Durability == nil || env.Durability.Settings["postgres"]["synchronous_commit"] == "" || env.Durability.Profile == "" {
		t.Errorf("FillDurability left %+v", env.Durability)
	}
}
