// Package testenv gives integration tests the endpoints of the services they
// need, and fails a test by the service's name when that service cannot be
// reached. It never skips: a test that quietly skips when its server is
// missing hides breakage. `make test` starts the stack first.
//
// The endpoints are those every command uses: the INBOXBENCH_* variables,
// then the local stack's variant they select (INBOXBENCH_SECURE=true:
// the secure stack's TLS files and credentials, through
// compose.ApplyVariant), under what the variables set.
package testenv

import (
	"testing"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// Service names as the tests and the stack print them.
const (
	Postgres = core.Postgres
	RabbitMQ = core.RabbitMQ
	Kafka    = core.Kafka
	RocketMQ = core.RocketMQ
)

// Config returns the configuration from the environment with the
// selected variant's endpoints applied and checked, failing the test on a
// bad variable or a variant whose stack has not been started.
func Config(t testing.TB) config.Config {
	t.Helper()
	c := core.Config(t)
	c, err := compose.ApplyVariant(c)
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("configuration: %v", err)
	}
	return c
}

// Require returns Config after checking that each named service accepts
// TCP connections at its configured address; otherwise the test fails,
// naming the service, the address and what to run.
func Require(t testing.TB, services ...string) config.Config {
	t.Helper()
	c := Config(t)
	v, _ := compose.VariantOf(c)
	return core.Reachable(t, c, compose.VariantFlag(v), services...)
}

// Addrs returns the host:port addresses configured for a service.
func Addrs(c config.Config, service string) []string { return core.Addrs(c, service) }

// StackDir is the local stack's directory as `bench` run from the
// repository root sees it (see core.StackDir).
func StackDir(t testing.TB, c config.Config) string { return core.StackDir(t, c) }
