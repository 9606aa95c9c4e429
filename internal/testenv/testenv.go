// Package testenv gives integration tests the endpoints of the services they
// need, and fails a test by the service's name when that service cannot be
// reached. It never skips: a test that quietly skips when its server is
// missing hides breakage. `make test` starts the stack first.
package testenv

import (
	"net"
	"net/url"
	"slices"
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
	RequireIn(t, c, "bench stack up", services...)
	return c
}

// RequireIn checks, as Require does, that each named service accepts TCP
// connections at every address c configures for it (each node of a
// replicated service), failing the test by name otherwise; up is the
// command that starts the stack c points at ("bench stack up --topology
// replicated").
func RequireIn(t testing.TB, c config.Config, up string, services ...string) {
	t.Helper()
	for _, s := range services {
		for _, addr := range Addrs(c, s) {
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				t.Fatalf("%s is not reachable at %s (%v): start the local stack with `%s %s`, or point %s at a running server", s, addr, err, up, s, envName(s))
			}
			conn.Close()
		}
	}
}

// settingOf names the configuration key holding each service's address.
var settingOf = map[string]string{
	Postgres: "postgres.url",
	RabbitMQ: "rabbitmq.url",
	Kafka:    "kafka.brokers",
	RocketMQ: "rocketmq.namesrv",
}

// Addrs returns the host:port addresses configured for a service: the
// hosts of a URL (default port 5672 for AMQP), or a comma-separated list.
func Addrs(c config.Config, service string) []string {
	v := c.Get(settingOf[service])
	if service == Postgres {
		cc, err := pgx.ParseConfig(v)
		if err != nil {
			return []string{config.Redact(v)}
		}
		out := []string{net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))}
		for _, f := range cc.Fallbacks { // the other hosts of a multi-host URL
			if a := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
		return out
	}
	if !strings.Contains(v, "://") {
		return c.List(settingOf[service])
	}
	u, err := url.Parse(v)
	if err != nil {
		return []string{config.Redact(v)}
	}
	if u.Port() == "" {
		return []string{net.JoinHostPort(u.Hostname(), "5672")}
	}
	return []string{u.Host}
}

// envName is the variable that points a service elsewhere.
func envName(service string) string {
	for _, s := range config.Settings() {
		if s.Key == settingOf[service] {
			return s.Env
		}
	}
	return "the service's INBOXBENCH_* variable"
}
