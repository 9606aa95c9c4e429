package rabbitmq_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/compose"
	rabbitstack "github.com/inboxbench/inboxbench/compose/rabbitmq"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// secureNode is the secure stack's RabbitMQ node, for rabbitmqctl.
func secureNode(t *testing.T, cfg config.Config) (*rabbitstack.Secure, *compose.Env) {
	t.Helper()
	e := testenv.SecureEnv(t, cfg)
	svcs, err := compose.Select(compose.VariantSecure, []string{"rabbitmq"})
	if err != nil {
		t.Fatal(err)
	}
	return svcs[0].(*rabbitstack.Secure), e
}

// withUser is cfg's URL with another user and password.
func withUser(t *testing.T, cfg config.Config, user, password string) config.Config {
	t.Helper()
	u, err := url.Parse(cfg.Get(rabbitmq.SettingURL))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return cfg.With(rabbitmq.SettingURL, u.String())
}

// TestSecureRefusals runs against the local secure stack (a TLS-only
// listener that verifies client certificates): each setting the node
// refuses, a missing permission included, ends Setup with an error
// naming that setting, before Setup's context (a minute) ends.
func TestSecureRefusals(t *testing.T) {
	cfg := testenv.Secure(t, testenv.RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Users of this test only: one without any permission on the vhost,
	// one that may read and write but not declare.
	node, e := secureNode(t, cfg)
	vhost := strings.TrimPrefix(mustURL(t, cfg).Path, "/")
	const password = "a-test-password"
	for _, u := range []string{"ib-test-none", "ib-test-nodeclare"} {
		_, _ = node.Ctl(ctx, e, "delete_user", u)
		if _, err := node.Ctl(ctx, e, "add_user", u, password); err != nil {
			t.Fatal(err)
		}
		defer node.Ctl(context.Background(), e, "delete_user", u) //nolint:errcheck
	}
	if _, err := node.Ctl(ctx, e, "set_permissions", "-p", vhost, "ib-test-nodeclare", "^$", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	plain := strings.Replace(cfg.Get(rabbitmq.SettingURL), "amqps://", "amqp://", 1)
	brokertest.Refusals(t, rabbitmq.Name,
		brokertest.Refusal{Name: "wrong password", Cfg: withUser(t, cfg, "inboxbench", "not-the-password"), Key: rabbitmq.SettingURL, Text: "refused the login"},
		brokertest.Refusal{Name: "plaintext client", Cfg: cfg.With(rabbitmq.SettingURL, plain), Key: rabbitmq.SettingURL, Text: "amqps://"},
		brokertest.Refusal{Name: "no client certificate", Cfg: cfg.With(rabbitmq.SettingCertFile, "").With(rabbitmq.SettingKeyFile, ""), Key: rabbitmq.SettingCertFile, Text: "requires a client certificate"},
		brokertest.Refusal{Name: "unknown CA", Cfg: cfg.With(rabbitmq.SettingCAFile, testenv.ForeignCA(t)), Key: rabbitmq.SettingCAFile, Text: "does not hold"},
		brokertest.Refusal{Name: "server name", Cfg: cfg.With(rabbitmq.SettingServerName, "rabbit.example"), Key: rabbitmq.SettingServerName, Text: "localhost"},
		brokertest.Refusal{Name: "no permission on the vhost", Cfg: withUser(t, cfg, "ib-test-none", password), Key: rabbitmq.SettingURL, Text: "may not open vhost"},
		brokertest.Refusal{Name: "no permission to declare", Cfg: withUser(t, cfg, "ib-test-nodeclare", password), Key: rabbitmq.SettingURL, Text: "lacks a permission"},
	)
}

// TestSecureExternalLogin: with EXTERNAL the node takes the user from the
// client certificate's common name, and the suite runs without a
// password in the URL.
func TestSecureExternalLogin(t *testing.T) {
	cfg := testenv.Secure(t, testenv.RabbitMQ)
	cfg = withUser(t, cfg, "nobody-by-password", "x").With(rabbitmq.SettingSASL, rabbitmq.SASLExternal)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := rabbitmq.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 1); err != nil {
		t.Fatalf("Setup as the certificate's user: %v", err)
	}
	defer b.DeleteTopic(context.Background(), topic) //nolint:errcheck
	if errs := b.Publish(ctx, topic, brokertest.Events(t, "e", 1, 3, 64)); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
}

func mustURL(t *testing.T, cfg config.Config) *url.URL {
	t.Helper()
	u, err := url.Parse(cfg.Get(rabbitmq.SettingURL))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestSecureExpiredClientCertificate: the node refuses a client
// certificate of its own CA that has expired, and the driver's
// explanation names the certificate setting. (bench refuses an expired
// certificate at validation, before dialling: internal/tlsfiles; this
// dials with one anyway, as a client that did not check would.)
func TestSecureExpiredClientCertificate(t *testing.T) {
	cfg := testenv.Secure(t, testenv.RabbitMQ)
	e := testenv.SecureEnv(t, cfg)
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "expired.crt"), filepath.Join(dir, "expired.key")
	if err := compose.IssueLeaf(e, compose.LeafTemplate("client", time.Now().Add(-48*time.Hour), 24*time.Hour), certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(cfg.Get(rabbitmq.SettingCAFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", mustURL(t, cfg).Host,
		&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	if err == nil {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1)) // TLS 1.3: the refusal comes after the client's handshake
	}
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("the node accepted an expired client certificate, or refused it otherwise: %v", err)
	}
	explained := rabbitmq.Explain(cfg.With(rabbitmq.SettingCertFile, certPath).With(rabbitmq.SettingKeyFile, keyPath), err)
	var se *config.SettingError
	if !errors.As(explained, &se) || se.Key != rabbitmq.SettingCertFile || !strings.Contains(explained.Error(), "expired") {
		t.Fatalf("explained as %v; want it to name %s as expired", explained, rabbitmq.SettingCertFile)
	}
	t.Logf("%v", explained)
}
