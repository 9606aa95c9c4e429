// Package compose runs the local stack: compose/docker-compose.yml for Docker
// users, and this native launcher for machines without Docker. The native
// launcher installs what is missing (Debian packages, Maven Central
// artifacts), starts each service as a detached process under the stack
// directory, waits for protocol-level readiness, and stops only what it
// started.
//
// This package is the mechanism: the Service interface and the optional
// interfaces beside it, Up, Down and Status, processes and their pid
// files, readiness, apt-get, Maven and the JVM (JavaRuntime), ports and
// listening sockets, durability profiles, the variants (the plain,
// replicated and secure stacks) and the secure stack's CA, certificates
// and passwords. The services themselves live in one package each
// (compose/postgres, compose/rabbitmq, compose/kafka, compose/rocketmq),
// which holds the service's single node, its replicated cluster, its
// secure variant and their tests, and registers them from its init():
//
//	func init() {
//		compose.Register("kafka", 3, compose.Variants{
//			compose.VariantPlain:      func() compose.Service { return &Service{} },
//			compose.VariantReplicated: func() compose.Service { return &Cluster{} },
//			compose.VariantSecure:     func() compose.Service { return newSecure() },
//		})
//	}
//
// compose/all imports every service package; cmd/bench and
// internal/testenv blank-import it.
//
// To add a service: make a package compose/<name> whose types implement
// Service (and Stopper, Packager, Porter, Wiper, DurabilityAware,
// Endpointer, Passworder … where they apply; a replicated variant
// implements Cluster), register it with the next free position and a
// constructor for each variant it has, and add the package to
// compose/all. A JVM service runs on a JavaRuntime; its configuration
// templates are embedded in its package (WriteTemplate). Nothing else
// changes: `bench stack` lists, starts and checks it, the variant flags
// point every command at it, and the secure stack generates its
// passwords. Its package's own tests see only its service registered;
// the tests of the whole stack live in compose/all.
package compose

import (
	"context"
	"io"
	"path/filepath"
	"time"

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

// Service is one server of a local stack as `bench stack` drives it: the
// plain stack's single node, a replicated stack's cluster, or the secure
// stack's node. Up, Down and Status know a service only through this
// interface and the optional ones beside it (Stopper, Packager, Porter,
// Wiper, ReadyTimer, DurabilityAware, Endpointer, Addresser, Passworder,
// DurabilityReporter; Cluster and its companions for a replicated
// stack), so an implementation's methods are covered by the comments
// here; theirs say only what they do in particular.
//
// A Service holds no state between calls. Every method gets the Env of
// the stack it runs in: its files live under e.Path (the variant's
// directory), its endpoints come from e.Cfg. What it must remember (pid
// files, the command it ran, the durability profile it started with, a
// cluster's first formation) is in files there, so that another bench
// process finds it.
type Service interface {
	// Name is the short name users type and read: postgres, rabbitmq,
	// kafka, rocketmq. It is the name its package registered, the same
	// in every variant.
	Name() string
	// Addr is the address the service is checked at, as status prints
	// it: the configured endpoint (a Docker stack or a remote server
	// answers there too), or a cluster's node addresses joined by commas.
	Addr(e *Env) string
	// Install makes sure binaries or artifacts are present (a Debian
	// binary, Maven artifacts); it runs before every Start and must be
	// cheap when nothing is missing. OS packages are installed before it
	// (Packager).
	Install(ctx context.Context, e *Env) error
	// Start launches the service's processes detached from the caller
	// (StartDetached) and returns without waiting for readiness: Up asks
	// Ready until it answers, while the processes run. It is only called
	// when Ready fails; a cluster's starts the nodes that are not running.
	Start(ctx context.Context, e *Env) error
	// Ready performs one protocol-level check (a SQL query, an AMQP
	// channel, a Kafka metadata request, a RocketMQ route query) within
	// ctx's deadline and returns the server's version as status shows
	// it. When the server refused the configured settings (TLS,
	// credentials, permissions) the error is a *config.SettingError
	// naming the setting.
	Ready(ctx context.Context, e *Env) (version string, err error)
	// Procs lists the processes Start launches, in the order Down stops
	// them (unless the service is a Stopper). Through their pid files,
	// up, status and the port checks tell the service's own processes
	// from anything else.
	Procs(e *Env) []Proc
	// Logs lists the log files a user should read when the service
	// fails: Up's errors name them with their last lines, and `bench
	// stack logs` prints them.
	Logs(e *Env) []string
}

// Stopper is implemented by services that need more than killing their
// processes (e.g. pg_ctl stop, rabbitmqctl stop).
type Stopper interface {
	Stop(ctx context.Context, e *Env) error
}

// Package is an OS package a service needs, with a check for whether it is
// already installed.
type Package struct {
	Deb   string
	Found func() bool
}

// Packager is implemented by services that need OS packages.
type Packager interface {
	Packages() []Package
}

// Wiper is implemented by services with data: the directories `bench
// stack down --wipe` removes (the Maven artifacts stay: they are a
// cache, not data).
type Wiper interface {
	DataDirs(e *Env) []string
}

// ReadyTimer is implemented by services that become ready within less
// than DefaultReadyTimeout after Start (Up waits that long).
type ReadyTimer interface {
	ReadyTimeout() time.Duration
}

// DefaultReadyTimeout bounds how long Up waits for a service that is not
// a ReadyTimer: a JVM or an Erlang VM booting on a shared 2-core machine.
const DefaultReadyTimeout = 180 * time.Second

// ReadyTimeout is how long Up waits for s to become ready after Start.
func ReadyTimeout(s Service) time.Duration {
	if t, ok := s.(ReadyTimer); ok {
		return t.ReadyTimeout()
	}
	return DefaultReadyTimeout
}
