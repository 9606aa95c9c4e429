package rocketmq

import (
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// DefaultNamesrv is the local stack's name server (a port contract of
// `bench stack` and compose/docker-compose.yml).
const DefaultNamesrv = "127.0.0.1:59876"

// The driver's settings (flags, INBOXBENCH_* variables).
var (
	SettingNamesrv = driverutil.Setting(Name, "namesrv", config.Setting{Default: DefaultNamesrv, Kind: config.List,
		Usage: "RocketMQ name servers (host:port), comma separated"})
	SettingAccessKey = driverutil.Setting(Name, "access-key", config.Setting{
		Usage: "RocketMQ access key (the user of RocketMQ 5 authentication, or a 4.x ACL key): every request is signed with it"})
	SettingSecretKey = driverutil.Setting(Name, "secret-key", config.Setting{Secret: true,
		Usage: "RocketMQ secret key (the user's password) that signs the requests"})
)

// tlsKeys are the driver's TLS settings.
var tlsKeys = driverutil.RegisterTLS(Name, SettingNamesrv, driverutil.TLSUsage{
	Switch:     "connect to the RocketMQ name servers and brokers with TLS (implied by any of the RocketMQ CA, certificate, key or server-name settings)",
	CA:         "PEM file of CA certificates for RocketMQ TLS (default: system roots)",
	Cert:       "PEM client certificate for RocketMQ TLS (with rocketmq.key-file), for servers with tls.server.need.client.auth",
	Key:        "PEM private key of the RocketMQ client certificate",
	ServerName: "name the RocketMQ name servers' and brokers' certificates must hold (default: the host dialled)",
})

// The driver's TLS settings.
var (
	SettingTLS        = tlsKeys.Switch
	SettingCAFile     = tlsKeys.CA
	SettingCertFile   = tlsKeys.Cert
	SettingKeyFile    = tlsKeys.Key
	SettingServerName = tlsKeys.ServerName
)

func init() {
	config.RegisterCheck(func(c config.Config) error { return tlsfiles.Check(c, tlsKeys) })
	config.RegisterCheck(keyPairRule)
}

// UsesTLS reports whether the driver connects with TLS (rocketmq.tls, or
// any TLS file), for a program that gives RocketMQ's own tools the same
// settings (calibrate).
func UsesTLS(cfg config.Config) bool { return tlsKeys.On(cfg) }

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
