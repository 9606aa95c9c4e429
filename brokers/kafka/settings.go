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
	// SettingAcks is the producer's acks: all (the default: the leader
	// answers once every in-sync replica has the record, and the producer
	// is idempotent) or 1 (the leader alone; idempotence needs acks=all,
	// so it is off): the weak setting a failover control shows losing
	// confirmed records.
	SettingAcks = config.Register(config.Setting{Key: "kafka.acks", Flag: "kafka-acks", Env: "INBOXBENCH_KAFKA_ACKS",
		Default: AcksAll, Check: checkAcks,
		Usage: "Kafka producer acks: all (every in-sync replica, idempotent producer) or 1 (the leader alone: a failover can lose confirmed records)"})
)

// Acks values.
const (
	AcksAll    = "all"
	AcksLeader = "1"
)

func checkAcks(v string) error {
	if v == AcksAll || v == AcksLeader {
		return nil
	}
	return fmt.Errorf("use %s or %s", AcksAll, AcksLeader)
}

// tlsKeys are the driver's TLS settings.
var tlsKeys = tlsfiles.Keys{CA: SettingCAFile, Cert: SettingCertFile, Key: SettingKeyFile, ServerName: SettingServerName, Addr: SettingBrokers, Switch: SettingTLS}

func init() {
	config.RegisterCheck(func(c config.Config) error { return tlsfiles.Check(c, tlsKeys) })
	config.RegisterCheck(saslRule)
}

// useTLS reports whether cfg asks for TLS: kafka.tls, or any TLS file.
func useTLS(cfg config.Config) bool { return tlsKeys.On(cfg) }

// UsesTLS reports whether the driver connects with TLS, for a program
// that gives Kafka's own tools the same settings (calibrate).
func UsesTLS(cfg config.Config) bool { return useTLS(cfg) }

func checkSASL(v string) error {
	switch strings.ToLower(v) {
	case "plain", "scram-sha-256", "scram-sha-512":
		return nil
	}
	return fmt.Errorf("not supported: use plain, scram-sha-256 or scram-sha-512")
}

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
	case mech == "plain" && !useTLS(c) && !c.PlaintextPasswordAllowed(c.List(SettingBrokers)):
		return config.Invalid(SettingSASL, mech, "sends the password in clear without TLS to %s: turn on %s (or use scram-sha-256 or scram-sha-512), or allow it with %s",
			strings.Join(c.List(SettingBrokers), ","), SettingTLS, config.SettingAllowPlaintextPasswords)
	}
	return nil
}
