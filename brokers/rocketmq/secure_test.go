package rocketmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	rocketstack "github.com/inboxbench/inboxbench/compose/rocketmq"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// TestSecureRefusals runs against the local secure stack (TLS enforcing,
// authentication and authorization on): each setting the servers refuse,
// a user without permissions included, ends Setup with an error naming
// that setting, before Setup's context (a minute) ends. The client
// library's admin client sent topic creation unsigned and dropped the
// broker's refusal, so Setup waited for a route until its context ended;
// the driver's own admin calls are signed and read the answer.
func TestSecureRefusals(t *testing.T) {
	cfg := testenv.Secure(t, testenv.RocketMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A user of this test only, authenticated but granted nothing.
	e := testenv.SecureEnv(t, cfg)
	creds, err := compose.ReadCredentials(e)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := rocketmq.NewRemoting(cfg.With(rocketmq.SettingAccessKey, rocketstack.AdminUser).With(rocketmq.SettingSecretKey, creds[rocketstack.AdminPassword]))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := admin.ClusterInfo(ctx, cfg.List(rocketmq.SettingNamesrv)[0])
	if err != nil {
		t.Fatal(err)
	}
	const password = "a-test-password"
	for _, b := range ci.Masters() {
		if err := admin.EnsureUser(ctx, b, "ib-test-nothing", password); err != nil {
			t.Fatal(err)
		}
	}
	noTLS := cfg.With(rocketmq.SettingTLS, "false").With(rocketmq.SettingCAFile, "").With(rocketmq.SettingServerName, "")
	for _, tc := range []struct {
		name string
		cfg  config.Config
		key  string
		text string
	}{
		{"wrong secret key", cfg.With(rocketmq.SettingSecretKey, "not-the-password"), rocketmq.SettingSecretKey, "signature"},
		{"unknown user", cfg.With(rocketmq.SettingAccessKey, "nobody"), rocketmq.SettingAccessKey, "no enabled user"},
		{"no access key", cfg.With(rocketmq.SettingAccessKey, "").With(rocketmq.SettingSecretKey, ""), rocketmq.SettingAccessKey, "not signed"},
		{"plaintext client", noTLS, rocketmq.SettingTLS, "enforcing"},
		{"unknown CA", cfg.With(rocketmq.SettingCAFile, testenv.ForeignCA(t)), rocketmq.SettingCAFile, "does not hold"},
		{"server name", cfg.With(rocketmq.SettingServerName, "rocketmq.example"), rocketmq.SettingServerName, "localhost"},
		{"no permission", cfg.With(rocketmq.SettingAccessKey, "ib-test-nothing").With(rocketmq.SettingSecretKey, password), rocketmq.SettingAccessKey, "lacks a permission"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			b, err := rocketmq.New(ctx, tc.cfg, nil)
			if err == nil {
				defer b.Close()
				err = b.Setup(ctx, brokertest.UniqueName(t, "ib"), 1)
			}
			var se *config.SettingError
			if !errors.As(err, &se) || se.Key != tc.key || !strings.Contains(err.Error(), tc.text) || ctx.Err() != nil {
				t.Fatalf("Setup: %v (context: %v); want a setting error naming %s that says %q, before the context ends", err, ctx.Err(), tc.key, tc.text)
			}
			t.Logf("%v", err)
		})
	}
}
