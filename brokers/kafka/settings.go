package kafka

import (
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// DefaultBrokers is the local stack's Kafka listener (a port contract of
// `bench stack` and compose/docker-compose.yml).
const DefaultBrokers = "127.0.0.1:59092"

// The driver's settings (flags, INBOXBENCH_* variables), read with
// config.Config.Get/List/Bool.
var (
	SettingBrokers = config.Register(config.Setting{Key: "kafka.brokers", Flag: "kafka-brokers", Env: "INBOXBENCH_KAFKA_BROKERS",
		Default: DefaultBrokers, Kind: config.List, Usage: "Kafka seed brokers, comma separated"})
	SettingTLS = config.Register(config.Setting{Key: "kafka.tls", Flag: "kafka-tls", Env: "INBOXBENCH_KAFKA_TLS",
		Kind: config.Bool, Usage: "connect to Kafka with TLS (implied by any of the Kafka CA, certificate, key or server-name settings)"})
	SettingCAFile = config.Register(config.Setting{Key: "kafka.ca-file", Flag: "kafka-ca-file", Env: "INBOXBENCH_KAFKA_CA_FILE",
		Usage: "PEM file of CA certificates for Kafka TLS (default: system roots)"})
	SettingCertFile = config.Register(config.Setting{Key: "kafka.cert-file", Flag: "kafka-cert-file", Env: "INBOXBENCH_KAFKA_CERT_FILE",
		Usage: "PEM client certificate for Kafka TLS (with kafka.key-file), for brokers with ssl.client.auth"})
	SettingKeyFile = config.Register(config.Setting{Key: "kafka.key-file", Flag: "kafka-key-file", Env: "INBOXBENCH_KAFKA_KEY_FILE",
		Usage: "PEM private key of the Kafka client certificate"})
	SettingServerName = config.Register(config.Setting{Key: "kafka.server-name", Flag: "kafka-server-name", Env: "INBOXBENCH_KAFKA_SERVER_NAME",
		Usage: "name the Kafka brokers' certificates must hold (default: the host dialled)"})
	SettingSASL = config.Register(config.Setting{Key: "kafka.sasl", Flag: "kafka-sasl", Env: "INBOXBENCH_KAFKA_SASL",
		Usage: "Kafka SASL mechanism: plain, scram-sha-256 or scram-sha-512 (empty: none)", Check: checkSASL})
	SettingUser = config.Register(config.Setting{Key: "kafka.user", Flag: "kafka-user", Env: "INBOXBENCH_KAFKA_USER",
		Usage: "Kafka SASL user"})
	SettingPassword = config.Register(config.Setting{Key: "kafka.password", Flag: "kafka-password", Env: "INBOXBENCH_KAFKA_PASSWORD",
		Usage: "Kafka SASL password", Secret: true})
)

// tlsKeys are the driver's TLS settings.
var tlsKeys = tlsfiles.Keys{CA: SettingCAFile, Cert: SettingCertFile, Key: SettingKeyFile, ServerName: SettingServerName, Addr: SettingBrokers, Switch: SettingTLS}

func init() {
	config.RegisterCheck(func(c config.Config) error { return tlsfiles.Check(c, tlsKeys) })
}

// useTLS reports whether cfg asks for TLS: kafka.tls, or any TLS file.
func useTLS(cfg config.Config) bool { return tlsKeys.On(cfg) }

func checkSASL(v string) error {
	switch strings.ToLower(v) {
	case "plain", "scram-sha-256", "scram-sha-512":
		return nil
	}
	return fmt.Errorf("not supported: use plain, scram-sha-256 or scram-sha-512")
}
