package rocketmq

import "github.com/inboxbench/inboxbench/config"

// DefaultNamesrv is the local stack's name server (a port contract of
// `bench stack` and compose/docker-compose.yml).
const DefaultNamesrv = "127.0.0.1:59876"

// The driver's settings (flags, INBOXBENCH_* variables).
var (
	SettingNamesrv = config.Register(config.Setting{Key: "rocketmq.namesrv", Flag: "rocketmq-namesrv", Env: "INBOXBENCH_ROCKETMQ_NAMESRV",
		Default: DefaultNamesrv, Kind: config.List, Usage: "RocketMQ name servers (host:port), comma separated"})
	SettingAccessKey = config.Register(config.Setting{Key: "rocketmq.access-key", Flag: "rocketmq-access-key", Env: "INBOXBENCH_ROCKETMQ_ACCESS_KEY",
		Usage: "RocketMQ ACL access key"})
	SettingSecretKey = config.Register(config.Setting{Key: "rocketmq.secret-key", Flag: "rocketmq-secret-key", Env: "INBOXBENCH_ROCKETMQ_SECRET_KEY",
		Usage: "RocketMQ ACL secret key", Secret: true})
)

func init() { config.RegisterRule(keyPairRule) }

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
