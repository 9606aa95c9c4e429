package all_test

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	rocketmqbroker "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// postgresURL is the configuration key of the PostgreSQL URL.
const postgresURL = "postgres.url"

// ready is the readiness check of s as `bench stack status` runs it.
func ready(ctx context.Context, e *compose.Env, s compose.Service) (string, error) {
	r := compose.Status(ctx, e, []compose.Service{s})[0]
	return r.Version, r.Err
}

// secureEnv is the Env of the running secure stack with its endpoints
// applied (what testenv.Secure gives the other packages' tests).
func secureEnv(t *testing.T) *compose.Env {
	t.Helper()
	c := core.Config(t)
	c, err := compose.ApplyVariant(c.With("stack.dir", core.StackDir(t, c)).With(compose.SettingSecure, "true"))
	if err != nil {
		t.Fatalf("the secure stack: %v", err)
	}
	e, err := compose.NewEnv(c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSecureStackRefusesPlaintext: every service of the secure stack,
// asked by a client with the right credentials but without TLS, refuses
// it, and the readiness check `bench stack status --secure` runs says so
// naming the setting; with TLS each answers.
func TestSecureStackRefusesPlaintext(t *testing.T) {
	e := secureEnv(t)
	pg, err := url.Parse(e.Cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	q := pg.Query()
	q.Set("sslmode", "disable")
	pg.RawQuery = q.Encode()
	plain := map[string]config.Config{
		"postgres": e.Cfg.With(postgresURL, pg.String()),
		"rabbitmq": e.Cfg.With(rabbitmqbroker.SettingURL, strings.Replace(e.Cfg.Get(rabbitmqbroker.SettingURL), "amqps://", "amqp://", 1)),
		"kafka": e.Cfg.With(kafkabroker.SettingTLS, "false").With(kafkabroker.SettingCAFile, "").With(kafkabroker.SettingCertFile, "").
			With(kafkabroker.SettingKeyFile, "").With(kafkabroker.SettingServerName, ""),
		"rocketmq": e.Cfg.With(rocketmqbroker.SettingTLS, "false").With(rocketmqbroker.SettingCAFile, "").With(rocketmqbroker.SettingServerName, ""),
	}
	want := map[string]string{"postgres": postgresURL, "rabbitmq": rabbitmqbroker.SettingURL, "kafka": kafkabroker.SettingTLS, "rocketmq": rocketmqbroker.SettingTLS}
	for _, s := range compose.Services(compose.VariantSecure) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if v, err := ready(ctx, e, s); err != nil {
			t.Errorf("%s over TLS: %v", s.Name(), err)
		} else {
			t.Logf("%s over TLS: %s", s.Name(), v)
		}
		pe := *e
		pe.Cfg = plain[s.Name()]
		_, err := ready(ctx, &pe, s)
		cancel()
		var se *config.SettingError
		if !errors.As(err, &se) || se.Key != want[s.Name()] {
			t.Errorf("%s without TLS: %v; want it refused, naming %s", s.Name(), err, want[s.Name()])
			continue
		}
		t.Logf("%s without TLS: %v", s.Name(), err)
	}
}

// TestSecurePostgresRefusals: a wrong password and an unknown CA end the
// readiness check naming postgres.url.
func TestSecurePostgresRefusals(t *testing.T) {
	e := secureEnv(t)
	svcs, err := compose.Select(compose.VariantSecure, []string{"postgres"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(e.Cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	wrong := *u
	wrong.User = url.UserPassword(u.User.Username(), "not-the-password")
	foreign := *u
	q := foreign.Query()
	q.Set("sslrootcert", testenv.ForeignCA(t))
	foreign.RawQuery = q.Encode()
	for name, tc := range map[string]struct{ url, text string }{
		"wrong password": {wrong.String(), "refused the password"},
		"unknown CA":     {foreign.String(), "not signed by the CA in sslrootcert"},
	} {
		pe := *e
		pe.Cfg = e.Cfg.With(postgresURL, tc.url)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := ready(ctx, &pe, svcs[0])
		cancel()
		var se *config.SettingError
		if !errors.As(err, &se) || se.Key != postgresURL || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v; want it refused naming %s, saying %q", name, err, postgresURL, tc.text)
		}
	}
}
