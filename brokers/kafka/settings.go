package kafka

import (
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// DefaultBrokers is the local stack's Kafka listener (a port contract of
// `bench stack` and compose/docker-compose.yml).
const DefaultBrokers = "127.0.0.1:59092"

// The driver's settings (flags, INBOXBENCH_* variables), read with
// config.Config.Get/List/Bool.
var (
	SettingBrokers = driverutil.Setting(Name, "brokers", config.Setting{Default: DefaultBrokers, Kind: config.List,
		Usage: "Kafka seed brokers, comma separated"})
	SettingSASL = driverutil.Setting(Name, "sasl", config.Setting{Check: checkSASL,
		Usage: "Kafka SASL mechanism: plain, scram-sha-256 or scram-sha-512 (empty: none)"})
	SettingUser     = driverutil.Setting(Name, "user", config.Setting{Usage: "Kafka SASL user"})
	SettingPassword = driverutil.Setting(Name, "password", config.Setting{Usage: "Kafka SASL password", Secret: true})
	// SettingAcks is the producer's acks: all (the default: the leader
	// answers once every in-sync replica has the record, and the producer
	// is idempotent) or 1 (the leader alone; idempotence needs acks=all,
	// so it is off): the weak setting a failover control shows losing
	// confirmed records.
	SettingAcks = driverutil.Setting(Name, "acks", config.Setting{Default: AcksAll, Check: checkAcks,
		Usage: "Kafka producer acks: all (every in-sync replica, idempotent producer) or 1 (the leader alone: a failover can lose confirmed records)"})
)

// tlsKeys are the driver's TLS settings.
var tlsKeys = driverutil.RegisterTLS(Name, SettingBrokers, driverutil.TLSUsage{
	Switch:     "connect to Kafka with TLS (implied by any of the Kafka CA, certificate, key or server-name settings)",
	CA:         "PEM file of CA certificates for Kafka TLS (default: system roots)",
	Cert:       "PEM client certificate for Kafka TLS (with kafka.key-file), for brokers with ssl.client.auth",
	Key:        "PEM private key of the Kafka client certificate",
	ServerName: "name the Kafka brokers' certificates must hold (default: the host dialled)",
})

// The driver's TLS settings.
var (
	SettingTLS        = tlsKeys.Switch
	SettingCAFile     = tlsKeys.CA
	SettingCertFile   = tlsKeys.Cert
	SettingKeyFile    = tlsKeys.Key
	SettingServerName = tlsKeys.ServerName
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

func init() {
	config.RegisterCheck(func(c config.Config) error { return tlsfiles.Check(c, tlsKeys) })
	config.RegisterCheck(saslRule)
}

// UsesTLS reports whether the driver connects with TLS (kafka.tls, or any
// TLS file), for a program that gives Kafka's own tools the same settings
// (calibrate).
func UsesTLS(cfg config.Config) bool { return tlsKeys.On(cfg) }

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
	case mech == "plain" && !UsesTLS(c) && !c.PlaintextPasswordAllowed(c.List(SettingBrokers)):
		return config.Invalid(SettingSASL, mech, "sends the password in clear without TLS to %s: turn on %s (or use scram-sha-256 or scram-sha-512), or allow it with %s",
			strings.Join(c.List(SettingBrokers), ","), SettingTLS, config.SettingAllowPlaintextPasswords)
	}
	return nil
}
