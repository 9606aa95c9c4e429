package kafka

import (
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/config"
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
		Kind: config.Bool, Usage: "connect to Kafka with TLS"})
	SettingCAFile = config.Register(config.Setting{Key: "kafka.ca-file", Flag: "kafka-ca-file", Env: "INBOXBENCH_KAFKA_CA_FILE",
		Usage: "PEM file of CA certificates for Kafka TLS (default: system roots)"})
	SettingSASL = config.Register(config.Setting{Key: "kafka.sasl", Flag: "kafka-sasl", Env: "INBOXBENCH_KAFKA_SASL",
		Usage: "Kafka SASL mechanism: plain, scram-sha-256 or scram-sha-512 (empty: none)", Check: checkSASL})
	SettingUser = config.Register(config.Setting{Key: "kafka.user", Flag: "kafka-user", Env: "INBOXBENCH_KAFKA_USER",
		Usage: "Kafka SASL user"})
	SettingPassword = config.Register(config.Setting{Key: "kafka.password", Flag: "kafka-password", Env: "INBOXBENCH_KAFKA_PASSWORD",
		Usage: "Kafka SASL password", Secret: true})
)

func checkSASL(v string) error {
	switch strings.ToLower(v) {
	case "plain", "scram-sha-256", "scram-sha-512":
		return nil
	}
	return fmt.Errorf("not supported: use plain, scram-sha-256 or scram-sha-512")
}

func init() { config.RegisterRule(saslRule) }

// tlsOn reports whether the client connects with TLS: kafka.tls, or a CA
// file, which implies it.
func tlsOn(c config.Config) bool { return c.Bool(SettingTLS) || c.Get(SettingCAFile) != "" }

// saslRule refuses SASL settings that would never be used or cannot
// work (a user or password without a mechanism, a mechanism without
// them), and PLAIN, which sends the password as it is, without TLS to a
// host other than this one unless the user allowed it.
func saslRule(c config.Config) error {
	mech := strings.ToLower(c.Get(SettingSASL))
	user, pass := c.Get(SettingUser), c.Get(SettingPassword)
	switch {
	case mech == "" && user != "":
		return config.Invalid(SettingUser, user, "is never sent: %s is empty; set it to plain, scram-sha-256 or scram-sha-512 (or leave the user out)", SettingSASL)
	case mech == "" && pass != "":
		return config.Invalid(SettingPassword, nil, "is never sent: %s is empty; set it to plain, scram-sha-256 or scram-sha-512 (or leave the password out)", SettingSASL)
	case mech != "" && user == "":
		return config.Invalid(SettingUser, nil, "is empty: SASL %s (%s) needs a user", mech, SettingSASL)
	case mech != "" && pass == "":
		return config.Invalid(SettingPassword, nil, "is empty: SASL %s (%s) needs a password", mech, SettingSASL)
	case mech == "plain" && !tlsOn(c) && !c.PlaintextPasswordAllowed(c.List(SettingBrokers)):
		return config.Invalid(SettingSASL, mech, "sends the password in clear without TLS to %s: turn on %s (or use scram-sha-256 or scram-sha-512), or allow it with %s",
			strings.Join(c.List(SettingBrokers), ","), SettingTLS, config.SettingAllowPlaintextPasswords)
	}
	return nil
}
