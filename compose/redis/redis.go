// Package redis is the local stack's Redis: the plain stack's server
// (Service), Debian's redis-server run as a process of the stack with its
// own configuration file, data directory, log and pid file under
// <stack>/redis. It registers it as "redis" (package compose says how
// services work); there is no replicated or secure variant.
//
// The server keeps every stream in memory, bounded by maxmemory with
// noeviction (a full server refuses XADD rather than drop data), and
// writes every change to its append-only file (appendonly yes in every
// durability profile). What an acknowledged XADD survives is the
// profile's appendfsync (DurabilitySettings): stock everysec — what
// redis.conf ships for the AOF, Debian's included — written to the AOF
// before the reply and fsync'ed by a background thread every second, so a
// crash of the redis-server process loses nothing acknowledged and a crash
// of the host up to about a second (two when the disk is slow); fsync
// always, fsync'ed before the reply; os no, flushed when the kernel
// decides. Debian's own configuration runs without the AOF
// (appendonly no: RDB snapshots only, so an acknowledged XADD lives in
// memory until the next snapshot), which no other broker of the stack
// does; the stack does not use it.
package redis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	redisbroker "github.com/inboxbench/inboxbench/brokers/redis"
	"github.com/inboxbench/inboxbench/compose"
)

// Service runs Debian's redis-server on the stack's port, configured by a
// file the stack writes: loopback only, protected mode, no RDB snapshots,
// the AOF with the profile's appendfsync, MaxMemory with noeviction.
type Service struct{}

const (
	serverBin = "/usr/bin/redis-server"
	// Port is the plain stack's Redis port (brokers/redis.DefaultURL).
	Port = 56379
	// MaxMemory bounds the data set: the driver trims what every group
	// acknowledged, so the streams hold the backlog a run keeps (the
	// runner bounds it) and what failed runs left.
	MaxMemory = "512mb"
	// readyTimeout covers loading an AOF of MaxMemory on a shared 2-core
	// host.
	readyTimeout = 60 * time.Second
)

func init() {
	compose.Register("redis", 6, compose.Variants{
		compose.VariantPlain: func() compose.Service { return &Service{} },
	})
}

// Name is "redis".
func (*Service) Name() string { return "redis" }

// ReadyTimeout implements compose.ReadyTimer.
func (*Service) ReadyTimeout() time.Duration { return readyTimeout }

// Addr is the host and port of the configured URL.
func (*Service) Addr(e *compose.Env) string {
	if a := redisbroker.Addr(e.Cfg.Get(redisbroker.SettingURL)); a != "" {
		return a
	}
	return "(" + redisbroker.SettingURL + " is not a valid Redis URL)"
}

// Packages is redis-server.
func (*Service) Packages() []compose.Package {
	return []compose.Package{{Deb: "redis-server", Found: func() bool { return compose.IsExecutable(serverBin) }}}
}

// path joins elem under the service's directory.
func path(e *compose.Env, elem ...string) string {
	return e.Path(append([]string{"redis"}, elem...)...)
}

// Procs is redis-server. Its process title names the configuration file
// (proc-title-template), which lies in the service's directory.
func (*Service) Procs(e *compose.Env) []compose.Proc {
	return []compose.Proc{{Name: "redis", PIDFile: path(e, "server.pid"), LogFile: path(e, "server.log"),
		Match: []string{"redis-server", path(e, "redis.conf")}, Home: path(e)}}
}

// Logs is the server's output: redis-server logs to stdout (logfile "").
func (*Service) Logs(e *compose.Env) []string { return []string{path(e, "server.log")} }

// DataDirs implements compose.Wiper: the whole directory.
func (*Service) DataDirs(e *compose.Env) []string { return []string{path(e)} }

// Ports implements compose.Porter: RESP.
func (*Service) Ports(*compose.Env) []compose.Port {
	return []compose.Port{{Port: Port, What: "RESP"}}
}

// Install checks for the Debian package's server.
func (*Service) Install(context.Context, *compose.Env) error {
	if !compose.IsExecutable(serverBin) {
		return fmt.Errorf("%s not found: install the Debian package redis-server", serverBin)
	}
	return nil
}

// DurabilitySettings implements compose.DurabilityAware: the AOF's
// appendfsync of each profile (see the package doc).
func (*Service) DurabilitySettings(profile string) string {
	return "appendfsync " + appendfsync(profile)
}

func appendfsync(profile string) string {
	switch profile {
	case compose.DurabilityFsync:
		return "always"
	case compose.DurabilityOS:
		return "no"
	}
	return "everysec"
}

// Start writes redis.conf and starts the server.
func (s *Service) Start(ctx context.Context, e *compose.Env) error {
	if err := os.MkdirAll(path(e, "data"), 0o755); err != nil {
		return err
	}
	conf := config(path(e), appendfsync(compose.StartProfile(e, s)))
	if err := os.WriteFile(path(e, "redis.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(serverBin, path(e, "redis.conf"))
	cmd.Dir = path(e)
	if err := compose.StartDetached(s.Procs(e)[0], cmd); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// config renders redis.conf for a server in dir.
func config(dir, fsync string) string {
	return strings.ReplaceAll(fmt.Sprintf(`# written by bench stack up
bind 127.0.0.1
port %d
protected-mode yes
daemonize no
logfile ""
# The title names this file, so the stack recognises its process.
proc-title-template "{title} {listen-addr} {config-file}"
dir DIR/data
# Every change goes to the append-only file; no RDB snapshots (their
# fork would compete with the benchmark for the two cores).
save ""
appendonly yes
appendfsync %s
appenddirname appendonlydir
maxmemory %s
maxmemory-policy noeviction
`, Port, fsync, MaxMemory), "DIR", dir)
}

// Ready sends PING with the configured URL and reads the version from
// INFO server: a server still loading its AOF answers LOADING.
func (*Service) Ready(ctx context.Context, e *compose.Env) (string, error) {
	return redisbroker.Version(ctx, e.Cfg)
}
