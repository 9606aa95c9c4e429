package nats

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// OutsideEnv implements brokers.Outside: the URL with its host and port
// replaced by the route's proxy, topic's shard streams and their
// subjects (a service consumes each as a durable pull consumer named
// after group, in the priority group "ib" with pinned clients, as the
// driver does), and the dead-letter subject. A NATS client also dials
// the servers the one it reached advertises; the stack's single server
// advertises none (no cluster), so every connection passes the proxy. A
// cluster's URL would not be proxied that way: Unproxied says so.
func (b *Broker) OutsideEnv(topic, group string, route brokers.Route) (brokers.OutsideEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := b.shardCount(ctx, topic)
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	u, err := url.Parse(strings.TrimSpace(strings.Split(b.cfg.Get(SettingURL), ",")[0]))
	if err != nil {
		return brokers.OutsideEnv{}, fmt.Errorf("nats: %w", err)
	}
	proxy, err := route(u.Host, "")
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	u.Host = proxy
	streams, subjects := make([]string, n), make([]string, n)
	for i := range n {
		streams[i], subjects[i] = StreamName(topic, i), Subject(topic, i)
	}
	env := brokers.OutsideEnv{Vars: map[string]string{"INBOXBENCH_NATS_URL": u.String(),
		"INBOXBENCH_QUEUES": strings.Join(streams, ","), "INBOXBENCH_NATS_SUBJECTS": strings.Join(subjects, ","),
		"INBOXBENCH_NATS_CONSUMER": consumerName(group), "INBOXBENCH_NATS_PRIORITY_GROUP": priorityGroup,
		"INBOXBENCH_DEAD_LETTER": DLQSubject(topic)}}
	if p, err := b.conn(); err == nil && len(p.nc.DiscoveredServers()) > 0 {
		env.Unproxied = "the server advertises other cluster members, which a client dials directly"
	}
	return env, nil
}
