// Package all imports every broker driver for its registration side
// effect; cmd/bench blank-imports it:
//
//	import _ "github.com/inboxbench/inboxbench/brokers/all"
package all

import (
	_ "github.com/inboxbench/inboxbench/brokers/kafka"      // "kafka", "kafka-embedded"
	_ "github.com/inboxbench/inboxbench/brokers/kafkashare" // "kafka-share" (share groups)
	_ "github.com/inboxbench/inboxbench/brokers/nats"       // "nats" (JetStream)
	_ "github.com/inboxbench/inboxbench/brokers/none"       // "none" (database-only baseline)
	_ "github.com/inboxbench/inboxbench/brokers/rabbitmq"   // "rabbitmq"
	_ "github.com/inboxbench/inboxbench/brokers/redis"      // "redis"
	_ "github.com/inboxbench/inboxbench/brokers/rocketmq"   // "rocketmq"
)
