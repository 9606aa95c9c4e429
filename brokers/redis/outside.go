package redis

import (
	"context"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// OutsideEnv implements brokers.Outside: the URL with its host and port
// replaced by the route's proxy (a Redis client keeps to the one address
// it was given), the topic's streams and its dead-letter stream. It
// creates group on the streams, from their beginning, which a service
// reads as INBOXBENCH_GROUP; the service must keep one reader per stream
// itself to keep per-key order (docs/services.md).
func (b *Broker) OutsideEnv(topic, group string, route brokers.Route) (brokers.OutsideEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := b.createGroup(ctx, topic, group)
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	raw := b.cfg.Get(SettingURL)
	proxy, err := route(Addr(raw), "")
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	u, err := withHost(raw, proxy)
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	streams := make([]string, n)
	for i := range streams {
		streams[i] = StreamName(topic, i)
	}
	return brokers.OutsideEnv{Vars: map[string]string{"INBOXBENCH_REDIS_URL": u,
		"INBOXBENCH_STREAMS": strings.Join(streams, ","), "INBOXBENCH_DEAD_LETTER": topic + DLQSuffix}}, nil
}
