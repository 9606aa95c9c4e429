package rabbitmq

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/config"
)

// TestExplainResetAfterHandshake: a node requiring a client certificate
// may reset a TLS 1.3 client's first write instead of delivering its
// alert; without a certificate configured that names rabbitmq.cert-file,
// with one it is left as it is.
func TestExplainResetAfterHandshake(t *testing.T) {
	reset := fmt.Errorf("write tcp 127.0.0.1:1->127.0.0.1:2: %w", syscall.ECONNRESET)
	cfg := config.Config{}.With(SettingURL, "amqps://u:p@127.0.0.1:5671/v")
	var se *config.SettingError
	if err := Explain(cfg, reset); !errors.As(err, &se) || se.Key != SettingCertFile {
		t.Errorf("no certificate: %v, want a setting error naming %s", err, SettingCertFile)
	}
	if err := Explain(cfg.With(SettingCertFile, "/c.pem"), reset); err != reset {
		t.Errorf("with a certificate: %v, want the reset unchanged", err)
	}
}

// TestExplainClosedDuringHandshake: when the node hangs up, amqp091's
// dial may end with ErrClosed (the reader failed first, the next write
// found the connection closed) instead of the read's error; a dial's
// ErrClosed is read as the hang-up it is.
func TestExplainClosedDuringHandshake(t *testing.T) {
	var se *config.SettingError
	tls := config.Config{}.With(SettingURL, "amqps://u:p@127.0.0.1:5671/v")
	if err := Explain(tls, handshakeErr(amqp.ErrClosed)); !errors.As(err, &se) || se.Key != SettingCertFile {
		t.Errorf("TLS without a certificate: %v, want a setting error naming %s", err, SettingCertFile)
	}
	plain := config.Config{}.With(SettingURL, "amqp://u:p@127.0.0.1:5671/v")
	if err := Explain(plain, handshakeErr(amqp.ErrClosed)); !errors.As(err, &se) || se.Key != SettingURL {
		t.Errorf("plaintext: %v, want a setting error naming %s", err, SettingURL)
	}
	if err := Explain(tls, amqp.ErrClosed); err != amqp.ErrClosed {
		t.Errorf("ErrClosed after the dial: %v, want it unchanged", err)
	}
}
