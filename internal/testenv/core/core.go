// Package core is internal/testenv without the local stack's variants:
// the configuration exactly as the environment gives it. Package compose's
// own tests use it (testenv applies a variant through compose, which
// they are part of); every other test uses testenv.
package core

import (
	"net"
	"net/url"
	"os"
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
	NATS     = "nats"
	Redis    = "redis"
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
	return Reachable(t, Config(t), "", services...)
}

// Reachable checks that each named service accepts TCP connections at its
// address in c and returns c; otherwise the test fails, naming the
// service, the address and what to run (stackFlag: how the command that
// starts the stack selects it, e.g. " --secure").
func Reachable(t testing.TB, c config.Config, stackFlag string, services ...string) config.Config {
	t.Helper()
	for _, s := range services {
		for _, addr := range Addrs(c, s) {
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				t.Fatalf("%s is not reachable at %s (%v): start the local stack with `bench stack up%s` (or `make stack-up`), or point %s at a running server", s, addr, err, stackFlag, envName(s))
			}
			conn.Close()
		}
	}
	return c
}

// settingOf names the configuration key holding each service's address.
var settingOf = map[string]string{
	Postgres: "postgres.url",
	RabbitMQ: "rabbitmq.url",
	Kafka:    "kafka.brokers",
	RocketMQ: "rocketmq.namesrv",
	NATS:     "nats.url",
	Redis:    "redis.url",
}

// Addrs returns the host:port addresses configured for a service: the
// hosts of a URL (every host of a multi-host PostgreSQL URL; default port
// 5672 for amqp://, 5671 for amqps://, 6379 for redis://), or a
// comma-separated list.
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
		port := map[string]string{"amqp": "5672", "amqps": "5671", "redis": "6379", "rediss": "6379"}[u.Scheme]
		return []string{net.JoinHostPort(u.Hostname(), port)}
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

// SkipUnlessCI skips a test that is not meant for this invocation (why
// says when it runs), except under CI=true, where a skipped test would
// hide that the stage meant to run it did not: there it fails, by name.
func SkipUnlessCI(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: CI=true, so this test must run here, not be skipped", why)
	}
	t.Skip(why)
}
