package all_test

import (
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	rocketmqbroker "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

// TestVariantEndpoints: a variant's services live in their own
// directory, its endpoints replace the settings the user did not give
// (config's TestWithDefaultsKeepsWhatTheUserGave: only those), and before its stack wrote what they need the error
// says to start it. The secure stack's credentials are written here as
// `bench stack up --secure` writes them; no server is needed.
func TestVariantEndpoints(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default().With("stack.dir", dir).With(compose.SettingSecure, "true")
	if _, err := compose.ApplyVariant(cfg); err == nil || !errors.Is(err, compose.ErrUsage) || !strings.Contains(err.Error(), "bench stack up --secure") {
		t.Fatalf("ApplyVariant before the stack wrote its files: %v, want a usage error naming the command", err)
	}
	e, err := compose.NewEnv(cfg, nil)
	if err != nil || e.Path("x") != filepath.Join(dir, compose.VariantSecure, "x") || e.SharedPath("m2") != filepath.Join(dir, "m2") {
		t.Fatalf("NewEnv: %v; Path %q SharedPath %q", err, e.Path("x"), e.SharedPath("m2"))
	}
	creds, err := compose.EnsureSecrets(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := compose.ApplyVariant(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(got.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); u.Port() != "57432" || pw != creds["postgres_password"] || u.Query().Get("sslmode") != "verify-full" || u.Query().Get("sslrootcert") != compose.TLSPath(e, "ca.crt") {
		t.Errorf("postgres.url = %s, want port 57432, the generated password, verify-full against the stack's CA", config.Redact(got.PGURL))
	}
	for key, want := range map[string]string{
		kafkabroker.SettingBrokers: "127.0.0.1:57092", kafkabroker.SettingSASL: "scram-sha-512", kafkabroker.SettingPassword: creds["kafka_password"],
		kafkabroker.SettingCertFile: compose.TLSPath(e, "client.crt"), rabbitmqbroker.SettingCAFile: compose.TLSPath(e, "ca.crt"),
		rocketmqbroker.SettingNamesrv: "127.0.0.1:57876", rocketmqbroker.SettingTLS: "true", rocketmqbroker.SettingSecretKey: creds["rocketmq_password"],
	} {
		if got.Get(key) != want {
			t.Errorf("%s = %q, want %q", key, got.Get(key), want)
		}
	}
	if plain, _ := compose.ApplyVariant(config.Default()); plain.PGURL != config.DefaultPGURL {
		t.Errorf("the plain stack's PGURL changed: %q", plain.PGURL)
	}
	if _, err := compose.Select(compose.VariantSecure, []string{"kafka-embedded"}); err == nil {
		t.Error("Select found a service the secure stack does not have")
	}
}
