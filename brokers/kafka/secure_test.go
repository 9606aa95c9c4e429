package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// TestSecureRefusals runs against the local secure stack (SASL_SSL with
// SCRAM and client certificates): each setting the broker refuses ends
// Setup with an error naming that setting, at once: Setup's context
// (a minute) is not what ended it, so nothing retried until a timeout.
func TestSecureRefusals(t *testing.T) {
	cfg := testenv.Secure(t, testenv.Kafka)
	noTLS := cfg.With(kafka.SettingTLS, "false").With(kafka.SettingCAFile, "").With(kafka.SettingCertFile, "").
		With(kafka.SettingKeyFile, "").With(kafka.SettingServerName, "")
	for _, tc := range []struct {
		name string
		cfg  config.Config
		key  string
	}{
		{"wrong password", cfg.With(kafka.SettingPassword, "not-the-password"), kafka.SettingPassword},
		{"unknown user", cfg.With(kafka.SettingUser, "nobody"), kafka.SettingPassword},
		{"plaintext client", noTLS, kafka.SettingTLS},
		{"no SASL", cfg.With(kafka.SettingSASL, ""), kafka.SettingSASL},
		{"no client certificate", cfg.With(kafka.SettingCertFile, "").With(kafka.SettingKeyFile, ""), kafka.SettingCertFile},
		{"unknown CA", cfg.With(kafka.SettingCAFile, testenv.ForeignCA(t)), kafka.SettingCAFile},
		{"server name", cfg.With(kafka.SettingServerName, "kafka.example"), kafka.SettingServerName},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b, err := kafka.New(ctx, tc.cfg, nil)
			if err == nil {
				defer b.Close()
				err = b.Setup(ctx, brokertest.UniqueName(t, "ib"), 1)
			}
			var se *config.SettingError
			if !errors.As(err, &se) || se.Key != tc.key || ctx.Err() != nil {
				t.Fatalf("Setup: %v (context: %v); want a setting error naming %s, before the context ends", err, ctx.Err(), tc.key)
			}
			t.Logf("%v", err)
		})
	}
}
