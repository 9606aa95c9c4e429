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

func checkSASL(v string) error {
	switch strings.ToLower(v) {
	case "plain", "scram-sha-256", "scram-sha-512":
		return nil
	}
	return fmt.Errorf("not supported: use plain, scram-sha-256 or scram-sha-512")
}
