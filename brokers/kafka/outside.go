package kafka

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
)

// A Kafka client dials the seeds only to learn the cluster's metadata,
// then connects to the addresses the brokers advertise: a proxy in front
// of the seeds alone would see the first request and nothing after. So a
// consumer outside the suite (a service under test) is sent to a listener
// of its own, whose advertised address is the proxy's: the local stack's
// broker listens on 127.0.0.1:59094 and advertises it as 127.0.0.1:59095,
// where the suite's proxy listens and forwards to 59094 (compose/kafka).
// A cluster of your own needs such a listener for the suite to cut a
// service's connections; without one, the service connects directly.

// DefaultOutsideListener is the local stack's proxied listener.
const DefaultOutsideListener = "127.0.0.1:59095=127.0.0.1:59094"

// SettingOutsideListener is PROXY=UPSTREAM: the advertised address of the
// listener for outside consumers, and where that listener really is.
var SettingOutsideListener = config.Register(config.Setting{Key: "kafka.outside-listener", Flag: "kafka-outside-listener",
	Env: "INBOXBENCH_KAFKA_OUTSIDE_LISTENER", Default: DefaultOutsideListener, Check: checkOutsideListener,
	Usage: "listener a service under test reaches through the suite's proxy, as PROXY=UPSTREAM: the broker advertises PROXY on its listener at UPSTREAM (empty: the service connects to the seeds directly, and its connections cannot be cut)"})

func checkOutsideListener(v string) error {
	if v == "" {
		return nil
	}
	proxy, upstream, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want PROXY=UPSTREAM, two host:port addresses")
	}
	for _, a := range []string{proxy, upstream} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%q: %w", a, err)
		}
	}
	return nil
}

// OutsideEnv implements brokers.Outside: the proxied listener as the
// seed (or the seeds themselves, unproxied, when there is none) and the
// dead-letter topic.
func (b *Broker) OutsideEnv(topic, _ string, route brokers.Route) (brokers.OutsideEnv, error) {
	vars := map[string]string{"INBOXBENCH_DEAD_LETTER": topic + DLQSuffix}
	spec := b.cfg.Get(SettingOutsideListener)
	if spec == "" || b.fake != nil {
		vars["INBOXBENCH_KAFKA_BROKERS"] = strings.Join(b.cfg.List(SettingBrokers), ",")
		return brokers.OutsideEnv{Vars: vars, Unproxied: "kafka.outside-listener is empty"}, nil
	}
	proxy, upstream, _ := strings.Cut(spec, "=")
	c, err := net.DialTimeout("tcp", upstream, 2*time.Second)
	if err != nil {
		return brokers.OutsideEnv{}, fmt.Errorf("kafka: the listener for services under test (%s, kafka.outside-listener) does not answer: %w; a local Kafka started by an older bench has none (`bench stack down kafka` then `bench stack up`); a cluster of your own needs one (docs/services.md) or the setting empty", upstream, err)
	}
	c.Close()
	addr, err := route(upstream, proxy)
	if err != nil {
		return brokers.OutsideEnv{}, err
	}
	vars["INBOXBENCH_KAFKA_BROKERS"] = addr
	return brokers.OutsideEnv{Vars: vars}, nil
}
