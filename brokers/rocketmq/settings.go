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
