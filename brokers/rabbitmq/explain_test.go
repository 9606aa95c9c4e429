package rabbitmq

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

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
