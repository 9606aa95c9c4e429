// Package testenv gives integration tests the endpoints of the services they
// need, and fails a test by the service's name when that service cannot be
// reached. It never skips for a missing server: a test that quietly skips
// then hides breakage; a test meant for another invocation skips through
// SkipUnlessCI, which fails instead under CI=true. `make test` starts the stack first.
//
// The endpoints are those every command uses: the INBOXBENCH_* variables,
// then the local stack's variant they select (INBOXBENCH_SECURE=true:
// the secure stack's TLS files and credentials, through
// compose.ApplyVariant), under what the variables set.
package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/compose"
	_ "github.com/inboxbench/inboxbench/compose/all" // the services ApplyVariant asks
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// Service names as the tests and the stack print them.
const (
	Postgres = core.Postgres
	RabbitMQ = core.RabbitMQ
	Kafka    = core.Kafka
	RocketMQ = core.RocketMQ
	NATS     = core.NATS
	Redis    = core.Redis
)

// Config returns the configuration from the environment with the
// selected variant's endpoints applied and checked, failing the test on a
// bad variable or a variant whose stack has not been started.
func Config(t testing.TB) config.Config {
	t.Helper()
	c := core.Config(t)
	// The stack directory as bench run from the repository root sees it,
	// not under the test's package directory.
	c, err := compose.ApplyVariant(c.With("stack.dir", core.StackDir(t, c)))
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

// SkipUnlessCI skips a test not meant for this invocation, and fails it
// under CI=true (core.SkipUnlessCI).
func SkipUnlessCI(t testing.TB, why string) { t.Helper(); core.SkipUnlessCI(t, why) }

// Addrs returns the host:port addresses configured for a service.
func Addrs(c config.Config, service string) []string { return core.Addrs(c, service) }

// StackDir is the local stack's directory as `bench` run from the
// repository root sees it (see core.StackDir).
func StackDir(t testing.TB, c config.Config) string { return core.StackDir(t, c) }

// Secure returns the configuration of the local secure stack (`bench
// stack up --secure`), whatever INBOXBENCH_SECURE says: for the tests of
// what its servers refuse. The test fails, naming the command that
// starts it, when its stack has not written its credentials, and naming
// the service when one is not reachable.
func Secure(t testing.TB, services ...string) config.Config {
	t.Helper()
	c := core.Config(t)
	c, err := compose.ApplyVariant(c.With("stack.dir", core.StackDir(t, c)).With(compose.SettingSecure, "true"))
	if err != nil {
		t.Fatalf("the secure stack: %v", err)
	}
	return core.Reachable(t, c, compose.VariantFlag(compose.VariantSecure), services...)
}

// Replicated returns the configuration of the local replicated stack
// (`bench stack up --topology replicated`), whatever INBOXBENCH_TOPOLOGY
// says: for the tests that fail its nodes over. The test fails naming
// the service and the address when a node of one of services does not
// answer (every host of a multi-host PostgreSQL URL, every Kafka seed).
func Replicated(t testing.TB, services ...string) config.Config {
	t.Helper()
	c := core.Config(t)
	c, err := compose.ApplyVariant(c.With("stack.dir", core.StackDir(t, c)).With(compose.SettingTopology, compose.TopologyReplicated))
	if err != nil {
		t.Fatalf("the replicated stack: %v", err)
	}
	return core.Reachable(t, c, compose.VariantFlag(compose.VariantReplicated), services...)
}

// SecureEnv is the secure stack's Env for c (its directory, users and
// certificates; see compose.ReadCredentials, compose.IssueLeaf).
func SecureEnv(t testing.TB, c config.Config) *compose.Env {
	t.Helper()
	e, err := compose.NewEnv(c.With("stack.dir", StackDir(t, c)).With(compose.SettingSecure, "true"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// ForeignCA writes a CA certificate that signed nothing of any stack and
// returns its path: a client trusting only it must refuse every server.
func ForeignCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a CA no stack uses"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "foreign-ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
