// Package testenv gives integration tests the endpoints of the services they
// need, and fails a test by the service's name when that service cannot be
// reached. It never skips: a test that quietly skips when its server is
// missing hides breakage. `make test` starts the stack first.
package testenv

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/jackc/pgx/v5"
)

// Service names as the tests and the stack print them.
const (
	Postgres = "postgres"
	RabbitMQ = "rabbitmq"
	Kafka    = "kafka"
	RocketMQ = "rocketmq"
)

// Config returns the configuration from the environment, failing the test on
// a bad variable.
func Config(t testing.TB) config.Config {
	t.Helper()
	c, err := config.FromEnv()
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	return c
}

// Require returns the configuration after checking that each named service
// accepts TCP connections at its configured address; otherwise the test
// fails, naming the service, the address and what to run.
func Require(t testing.TB, services ...string) config.Config {
	t.Helper()
	c := Config(t)
	for _, s := range services {
		for _, addr := range Addrs(c, s) {
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				t.Fatalf("%s is not reachable at %s (%v): start the local stack with `bench stack up` (or `make stack-up`), or point %s at a running server", s, addr, err, envName(s))
			}
			conn.Close()
		}
	}
	return c
}

// Addrs returns the host:port addresses configured for a service.
func Addrs(c config.Config, service string) []string {
	switch service {
	case Postgres:
		cc, err := pgx.ParseConfig(c.PGURL)
		if err != nil {
			return []string{c.PGURL}
		}
		return []string{net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))}
	case RabbitMQ:
		u, err := url.Parse(c.RabbitMQURL)
		if err != nil {
			return []string{c.RabbitMQURL}
		}
		h := u.Host
		if !strings.Contains(h, ":") {
			h += ":5672"
		}
		return []string{h}
	case Kafka:
		return c.KafkaBrokers
	case RocketMQ:
		return c.RocketMQNamesrv
	}
	return nil
}

func envName(service string) string {
	switch service {
	case Postgres:
		return "INBOXBENCH_PG_URL"
	case RabbitMQ:
		return "INBOXBENCH_RABBITMQ_URL"
	case Kafka:
		return "INBOXBENCH_KAFKA_BROKERS"
	case RocketMQ:
		return "INBOXBENCH_ROCKETMQ_NAMESRV"
	}
	return "the service's INBOXBENCH_* variable"
}
