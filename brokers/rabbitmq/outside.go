package rabbitmq

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/inboxbench/inboxbench/brokers"
)

// OutsideEnv implements brokers.Outside: the URL of the node this driver
// connects to first, its host and port replaced by the route's proxy, the
// shard queues of topic (each single-active-consumer: one consumer at a
// time holds it) and its dead-letter queue, which the shard queues
// dead-letter a rejected message to.
func (b *Broker) OutsideEnv(topic, _ string, route brokers.Route) (brokers.OutsideEnv, error) {
	n, err := b.shardCount(topic)
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	u, err := url.Parse(b.urls[0])
	if err != nil {
		return brokers.OutsideEnv{}, fmt.Errorf("rabbitmq: %w", err)
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
	}
	host := u.Hostname()
	proxy, err := route(host+":"+port, "")
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	u.Host = proxy
	queues := make([]string, n)
	for i := range queues {
		queues[i] = queueName(topic, i)
	}
	vars := map[string]string{"INBOXBENCH_RABBITMQ_URL": u.String(), "INBOXBENCH_QUEUES": strings.Join(queues, ","),
		"INBOXBENCH_DEAD_LETTER": topic + DLQSuffix}
	if u.Scheme == "amqps" && b.cfg.Get(SettingServerName) == "" {
		// The proxy's address is not the name the node's certificate holds.
		vars["INBOXBENCH_RABBITMQ_SERVER_NAME"] = host
	}
	return brokers.OutsideEnv{Vars: vars}, nil
}
