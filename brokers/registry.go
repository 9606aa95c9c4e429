package brokers

// The registry: drivers register a Factory by name in their init, and
// callers open them by that name.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/inboxbench/inboxbench/config"
)

// Options are driver options beside the endpoints in config.Config; keys
// are driver specific and documented by each driver (unknown keys are an
// error so typos surface).
type Options map[string]string

// Factory creates a driver instance. It must not block for long: drivers
// connect lazily or with a bounded timeout.
type Factory func(ctx context.Context, cfg config.Config, opts Options) (Broker, error)

// Constructor is the Factory of a driver's typed New: its drivers
// register with brokers.Register(Name, brokers.Constructor(New), info). A
// failed New gives a nil Broker, never a typed nil.
func Constructor[B Broker](newB func(context.Context, config.Config, Options) (B, error)) Factory {
	return func(ctx context.Context, cfg config.Config, opts Options) (Broker, error) {
		b, err := newB(ctx, cfg, opts)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}

// Info is what a driver says of itself to the registry, for callers that
// must know it before opening the driver, or without opening it.
type Info struct {
	// Service is the local stack's service (package compose, `bench
	// stack`) the driver's broker runs as: a run checks it is reachable
	// before publishing, calibrate asks it for its version, broker-restart
	// restarts it. "" when the driver needs none (its broker lives in the
	// process, Capabilities.InProcess).
	Service string
	// Module is the Go module of the driver's client library, whose
	// version results record; "" when it has none.
	Module string
	// Baseline marks the database-only driver (Capabilities.Baseline),
	// which `bench run --brokers all` puts first beside every driver with
	// a stack service.
	Baseline bool
}

// All is what `--brokers all` names: the baseline drivers, then every
// driver whose broker is a service of the stack, each sorted by name
// (drivers of a broker living in the process, such as kafka-embedded,
// are for quick functional runs and left out).
func All() []string {
	var base, served []string
	for _, n := range Names() {
		switch info := InfoOf(n); {
		case info.Baseline:
			base = append(base, n)
		case info.Service != "":
			served = append(served, n)
		}
	}
	return append(base, served...)
}

type driver struct {
	open Factory
	info Info
}

var (
	registryMu sync.RWMutex
	registry   = map[string]driver{}
)

// Register makes a driver available by name. It panics on an empty name, a
// nil factory or a duplicate name, as database/sql does: those are
// programming errors found at start-up.
func Register(name string, f Factory, info Info) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if name == "" || f == nil {
		panic("brokers: Register needs a name and a factory")
	}
	if _, dup := registry[name]; dup {
		panic("brokers: Register called twice for driver " + name)
	}
	registry[name] = driver{open: f, info: info}
}

// InfoOf returns what the driver registered as name says of itself (the
// zero Info for an unknown name).
func InfoOf(name string) Info {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return registry[name].info
}

// Names returns the registered driver names, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Open creates a driver instance by name.
func Open(ctx context.Context, name string, cfg config.Config, opts Options) (Broker, error) {
	registryMu.RLock()
	d, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("brokers: unknown broker %q: registered are %v (is brokers/all imported?)", name, Names())
	}
	return d.open(ctx, cfg, opts)
}

// OptPublishWindow is the option of every driver that publishes
// asynchronously: how many messages may be sent and not yet confirmed.
const OptPublishWindow = "publish-window"

// PublishWindow returns the publish-window option of opts, or def when
// it is not set; an error names the driver, the option and what it wants.
func PublishWindow(driver string, opts Options, def int) (int, error) {
	v, ok := opts[OptPublishWindow]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s: option %s=%q: want a positive number of messages", driver, OptPublishWindow, v)
	}
	return n, nil
}
