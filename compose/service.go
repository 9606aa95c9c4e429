// Package compose runs the local stack: compose/docker-compose.yml for Docker
// users, and this native launcher for machines without Docker. The native
// launcher installs what is missing (Debian packages, Maven Central
// artifacts), starts each service as a detached process under the stack
// directory, waits for protocol-level readiness, and stops only what it
// started.
package compose

import (
	"context"
	"io"
	"path/filepath"

	"github.com/inboxbench/inboxbench/config"
)

// Env is what every service gets: where the stack lives, where to report,
// and the endpoint configuration (readiness is checked at the configured
// address, so `status` works against a compose stack too).
type Env struct {
	Dir string // absolute stack directory, e.g. /repo/.stack
	// Variant is the stack this Env is about: VariantPlain, or a variant
	// whose state lives in Dir/<variant> (see variant.go).
	Variant string
	Cfg     config.Config
	Out     io.Writer // progress lines for the user
	// Durability is the profile `up` starts services with (stock, fsync,
	// os; see durability.go): "" keeps the one each service was started
	// with. A running service with another profile is restarted.
	Durability string
}

// Path joins elements under the directory of the Env's stack (the stack
// directory itself for the plain stack, Dir/<variant> for a variant).
func (e *Env) Path(elem ...string) string {
	return filepath.Join(append([]string{variantDir(e.Dir, e.Variant)}, elem...)...)
}

// SharedPath joins elements under the stack directory itself, for what
// every variant shares (the Maven cache, the apt log).
func (e *Env) SharedPath(elem ...string) string {
	return filepath.Join(append([]string{e.Dir}, elem...)...)
}

// Service is one server of the local stack.
type Service interface {
	// Name is the short name users type and read: postgres, rabbitmq, kafka, rocketmq.
	Name() string
	// Addr is the address the service is checked at (from the config).
	Addr(e *Env) string
	// Install makes sure binaries or artifacts are present (apt-get, Maven).
	Install(ctx context.Context, e *Env) error
	// Start launches the service's processes detached from the caller.
	// It is only called when Ready fails.
	Start(ctx context.Context, e *Env) error
	// Ready performs one protocol-level check (a SQL query, an AMQP
	// connection, a Kafka metadata request, a RocketMQ route query) and
	// returns the server's version.
	Ready(ctx context.Context, e *Env) (version string, err error)
	// Procs lists the processes Start launches; Stop and status use them.
	Procs(e *Env) []Proc
	// Logs lists the log files a user should read when the service fails.
	Logs(e *Env) []string
}

// Stopper is implemented by services that need more than killing their
// processes (e.g. pg_ctl stop, rabbitmqctl stop).
type Stopper interface {
	Stop(ctx context.Context, e *Env) error
}
