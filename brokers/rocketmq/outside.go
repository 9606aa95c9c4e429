package rocketmq

import "github.com/inboxbench/inboxbench/brokers"

// OutsideEnv implements brokers.Outside: the name servers as configured
// (a client asks them for the broker's address, brokerIP1, and dials
// that: a proxy in front of the name server would not see the broker
// connections, so they are not routed) and the dead-letter topic.
func (b *Broker) OutsideEnv(topic, _ string, _ brokers.Route) (brokers.OutsideEnv, error) {
	return brokers.OutsideEnv{Vars: map[string]string{"INBOXBENCH_DEAD_LETTER": topic + DLQSuffix},
		Unproxied: "a RocketMQ client dials the broker address its name server hands out"}, nil
}
