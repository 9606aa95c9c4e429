package kafka_test

import (
	"testing"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/kafka"
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
	brokertest.Refusals(t, kafka.Name,
		brokertest.Refusal{Name: "wrong password", Cfg: cfg.With(kafka.SettingPassword, "not-the-password"), Key: kafka.SettingPassword},
		brokertest.Refusal{Name: "unknown user", Cfg: cfg.With(kafka.SettingUser, "nobody"), Key: kafka.SettingPassword},
		brokertest.Refusal{Name: "plaintext client", Cfg: noTLS, Key: kafka.SettingTLS},
		brokertest.Refusal{Name: "no SASL", Cfg: cfg.With(kafka.SettingSASL, ""), Key: kafka.SettingSASL},
		brokertest.Refusal{Name: "no client certificate", Cfg: cfg.With(kafka.SettingCertFile, "").With(kafka.SettingKeyFile, ""), Key: kafka.SettingCertFile},
		brokertest.Refusal{Name: "unknown CA", Cfg: cfg.With(kafka.SettingCAFile, testenv.ForeignCA(t)), Key: kafka.SettingCAFile},
		brokertest.Refusal{Name: "server name", Cfg: cfg.With(kafka.SettingServerName, "kafka.example"), Key: kafka.SettingServerName},
	)
}
