package rocketmq

import (
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// DefaultNamesrv is the local stack's name server (a port contract of
// `bench stack` and compose/docker-compose.yml).
const DefaultNamesrv = "127.0.0.1:59876"

// The driver's settings (flags, INBOXBENCH_* variables).
var (
	SettingNamesrv = config.Register(config.Setting{Key: "rocketmq.namesrv", Flag: "rocketmq-namesrv", Env: "INBOXBENCH_ROCKETMQ_NAMESRV",
		Default: DefaultNamesrv, Kind: config.List, Usage: "RocketMQ name servers (host:port), comma separated"})
	SettingAccessKey = config.Register(config.Setting{Key: "rocketmq.access-key", Flag: "rocketmq-access-key", Env: "INBOXBENCH_ROCKETMQ_ACCESS_KEY",
		Usage: "RocketMQ access key (the user of RocketMQ 5 authentication, or a 4.x ACL key): every request is signed with it"})
	SettingSecretKey = config.Register(config.Setting{Key: "rocketmq.secret-key", Flag: "rocketmq-secret-key", Env: "INBOXBENCH_ROCKETMQ_SECRET_KEY",
		Usage: "RocketMQ secret key (the user's password) that signs the requests", Secret: true})
	SettingTLS = config.Register(config.Setting{Key: "rocketmq.tls", Flag: "rocketmq-tls", Env: "INBOXBENCH_ROCKETMQ_TLS",
		Kind: config.Bool, Usage: "connect to the RocketMQ name servers and brokers with TLS (implied by any of the RocketMQ CA, certificate, key or server-name settings)"})
	SettingCAFile = config.Register(config.Setting{Key: "rocketmq.ca-file", Flag: "rocketmq-ca-file", Env: "INBOXBENCH_ROCKETMQ_CA_FILE",
		Usage: "PEM file of CA certificates for RocketMQ TLS (default: system roots)"})
	SettingCertFile = config.Register(config.Setting{Key: "rocketmq.cert-file", Flag: "rocketmq-cert-file", Env: "INBOXBENCH_ROCKETMQ_CERT_FILE",
		Usage: "PEM client certificate for RocketMQ TLS (with rocketmq.key-file), for servers with tls.server.need.client.auth"})
	SettingKeyFile = config.Register(config.Setting{Key: "rocketmq.key-file", Flag: "rocketmq-key-file", Env: "INBOXBENCH_ROCKETMQ_KEY_FILE",
		Usage: "PEM private key of the RocketMQ client certificate"})
	SettingServerName = config.Register(config.Setting{Key: "rocketmq.server-name", Flag: "rocketmq-server-name", Env: "INBOXBENCH_ROCKETMQ_SERVER_NAME",
		Usage: "name the RocketMQ name servers' and brokers' certificates must hold (default: the host dialled)"})
)

// tlsKeys are the driver's TLS settings.
var tlsKeys = tlsfiles.Keys{CA: SettingCAFile, Cert: SettingCertFile, Key: SettingKeyFile, ServerName: SettingServerName, Addr: SettingNamesrv, Switch: SettingTLS}

func init() {
	config.RegisterCheck(func(c config.Config) error { return tlsfiles.Check(c, tlsKeys) })
	config.RegisterCheck(keyPairRule)
}

// useTLS reports whether cfg asks for TLS: rocketmq.tls, or any TLS file.
func useTLS(cfg config.Config) bool { return tlsKeys.On(cfg) }

// UsesTLS reports whether the driver connects with TLS, for a program
// that gives RocketMQ's own tools the same settings (calibrate).
func UsesTLS(cfg config.Config) bool { return useTLS(cfg) }

// keyPairRule refuses half an ACL key pair: without the secret the
// library does not sign at all while the driver's own consumer would sign
// with an empty key, and a secret without its access key signs nothing.
func keyPairRule(c config.Config) error {
	ak, sk := c.Get(SettingAccessKey), c.Get(SettingSecretKey)
	switch {
	case ak != "" && sk == "":
		return config.Invalid(SettingSecretKey, nil, "is empty while %s is set: give both keys, or neither", SettingAccessKey)
	case ak == "" && sk != "":
		return config.Invalid(SettingAccessKey, nil, "is empty while %s is set: give both keys, or neither", SettingSecretKey)
	}
	return nil
}
