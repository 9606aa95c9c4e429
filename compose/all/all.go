// Package all imports every service of the local stack for its
// registration side effect (compose.Register); cmd/bench and
// internal/testenv blank-import it:
//
//	import _ "github.com/inboxbench/inboxbench/compose/all"
package all

import (
	_ "github.com/inboxbench/inboxbench/compose/kafka"    // "kafka"
	_ "github.com/inboxbench/inboxbench/compose/nats"     // "nats"
	_ "github.com/inboxbench/inboxbench/compose/postgres" // "postgres"
	_ "github.com/inboxbench/inboxbench/compose/rabbitmq" // "rabbitmq"
	_ "github.com/inboxbench/inboxbench/compose/redis"    // "redis"
	_ "github.com/inboxbench/inboxbench/compose/rocketmq" // "rocketmq"
)
