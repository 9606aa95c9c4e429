package rocketmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	rocketstack "github.com/inboxbench/inboxbench/compose/rocketmq"
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
	brokertest.Refusals(t, rocketmq.Name,
		brokertest.Refusal{Name: "wrong secret key", Cfg: cfg.With(rocketmq.SettingSecretKey, "not-the-password"), Key: rocketmq.SettingSecretKey, Text: "signature"},
		brokertest.Refusal{Name: "unknown user", Cfg: cfg.With(rocketmq.SettingAccessKey, "nobody"), Key: rocketmq.SettingAccessKey, Text: "no enabled user"},
		brokertest.Refusal{Name: "no access key", Cfg: cfg.With(rocketmq.SettingAccessKey, "").With(rocketmq.SettingSecretKey, ""), Key: rocketmq.SettingAccessKey, Text: "not signed"},
		brokertest.Refusal{Name: "plaintext client", Cfg: noTLS, Key: rocketmq.SettingTLS, Text: "enforcing"},
		brokertest.Refusal{Name: "unknown CA", Cfg: cfg.With(rocketmq.SettingCAFile, testenv.ForeignCA(t)), Key: rocketmq.SettingCAFile, Text: "does not hold"},
		brokertest.Refusal{Name: "server name", Cfg: cfg.With(rocketmq.SettingServerName, "rocketmq.example"), Key: rocketmq.SettingServerName, Text: "localhost"},
		brokertest.Refusal{Name: "no permission", Cfg: cfg.With(rocketmq.SettingAccessKey, "ib-test-nothing").With(rocketmq.SettingSecretKey, password), Key: rocketmq.SettingAccessKey, Text: "lacks a permission"},
	)
}
