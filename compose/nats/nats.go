// Package nats is the local stack's NATS server with JetStream: the plain
// stack's single nats-server (Service), built from its Go module with `go
// install` into the stack directory (Debian's nats-server 2.9 predates the
// priority groups the driver pins a partition's consumer with). It
// registers it as "nats" (package compose says how services work).
//
// Layout under the stack directory:
//
//	nats/bin/nats-server   the server, GOBIN of `go install …@ServerVersion`
//	nats/nats.conf         its configuration (rewritten on every start)
//	nats/data              JetStream's file store (store_dir)
//	logs/nats.log          its output
//	run/nats.pid
//
// It listens on loopback only (DefaultURL's port, 54222), with no
// cluster and no monitoring port; JetStream keeps streams in files, its
// memory store capped at 64 MiB, and the Go runtime's heap limit
// (GOMEMLIMIT) is 256 MiB. What a confirmed publish survives depends on
// sync_interval, set by the durability profile (DurabilitySettings).
package nats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsbroker "github.com/inboxbench/inboxbench/brokers/nats"
	"github.com/inboxbench/inboxbench/compose"
)

const (
	// ServerModule is the Go module the server is built from.
	ServerModule = "github.com/nats-io/nats-server/v2"
	// ServerVersion is the release the stack installs: 2.11 added
	// priority groups with pinned clients; 2.15.3 is the newest the Go
	// module proxy served when it was pinned.
	ServerVersion = "v2.15.3"
	// MemoryLimit is the server's GOMEMLIMIT (docs/stack.md lists it).
	MemoryLimit = "256MiB"
)

func init() {
	compose.Register("nats", 5, compose.Variants{
		compose.VariantPlain: func() compose.Service { return &Service{} },
	})
}

// Service is the plain stack's nats-server.
type Service struct{}

// Name is "nats".
func (*Service) Name() string { return "nats" }

// Addr is the configured URL's host and port.
func (*Service) Addr(e *compose.Env) string {
	if a := natsbroker.Addr(e.Cfg.Get(natsbroker.SettingURL)); a != "" {
		return a
	}
	return "(" + natsbroker.SettingURL + " is not a valid NATS URL)"
}

// Binary is the server's path under the stack directory.
func Binary(e *compose.Env) string { return e.Path("nats", "bin", "nats-server") }

// Install builds the pinned nats-server with `go install` into the stack
// directory unless the binary there is that version already; Go is all
// it needs (the module proxy serves the source).
func (*Service) Install(ctx context.Context, e *compose.Env) error {
	return GoTool{Bin: Binary(e), Pkg: ServerModule, Version: ServerVersion}.Install(ctx, e)
}

// GoTool is a Go program the stack builds from the module proxy: Pkg (a
// main package's path) at Version, into Bin.
type GoTool struct{ Bin, Pkg, Version string }

// Install builds the tool with `go install` into Bin's directory, unless
// Bin exists and its --version output names the version; the build's
// output goes to logs/nats-install.log.
func (t GoTool) Install(ctx context.Context, e *compose.Env) error {
	bin, pkg, version := t.Bin, t.Pkg+"@"+t.Version, t.Version
	if out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput(); err == nil && strings.Contains(string(out), strings.TrimPrefix(version, "v")) {
		return nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return errors.New("the go command is not on PATH: it builds " + pkg + " (install Go, or put " + bin + " there yourself)")
	}
	dir := bin[:strings.LastIndex(bin, "/")]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(e.Out, "%-9s building %s with go install (log: %s)\n", "nats", pkg, e.Path("logs", "nats-install.log"))
	cmd := exec.CommandContext(ctx, goBin, "install", pkg)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0")
	if err := compose.RunLogged(ctx, e.Path("logs", "nats-install.log"), cmd); err != nil {
		return fmt.Errorf("go install %s: %w", pkg, err)
	}
	return nil
}

// proc is the server process.
func (*Service) proc(e *compose.Env) compose.Proc {
	return compose.Proc{Name: "nats", PIDFile: e.Path("run", "nats.pid"), LogFile: e.Path("logs", "nats.log"),
		Match: []string{"nats-server"}, Home: e.Path("nats")}
}

// Procs is the server.
func (n *Service) Procs(e *compose.Env) []compose.Proc { return []compose.Proc{n.proc(e)} }

// Logs is the server's output.
func (n *Service) Logs(e *compose.Env) []string {
	return []string{n.proc(e).LogFile, e.Path("logs", "nats-install.log")}
}

// DataDirs implements compose.Wiper: JetStream's store.
func (*Service) DataDirs(e *compose.Env) []string { return []string{e.Path("nats", "data")} }

// ReadyTimeout implements compose.ReadyTimer: the server answers within
// a second or two.
func (*Service) ReadyTimeout() time.Duration { return 30 * time.Second }

// Ports implements compose.Porter: the client port.
func (n *Service) Ports(e *compose.Env) []compose.Port {
	_, p, err := net.SplitHostPort(n.listen(e))
	port, _ := strconv.Atoi(p)
	if err != nil || port == 0 {
		return nil
	}
	return []compose.Port{{Port: port, What: "NATS"}}
}

// listen is the address the server binds: the configured URL's when it
// is on loopback, else the stack's default.
func (*Service) listen(e *compose.Env) string {
	return compose.LoopbackOr([]string{natsbroker.Addr(e.Cfg.Get(natsbroker.SettingURL))}, natsbroker.Addr(natsbroker.DefaultURL))
}

// DurabilitySettings implements compose.DurabilityAware: the fsync profile
// makes JetStream fsync every write before it acknowledges the publish
// (sync_interval: always); stock and os keep its default, a flush to disk
// every two minutes, so a confirmed publish is in the page cache and a
// crash of the machine (not of the server) can lose up to two minutes.
func (*Service) DurabilitySettings(profile string) string {
	if profile == compose.DurabilityFsync {
		return "sync_interval: always"
	}
	return ""
}

// config renders nats.conf for the profile the start uses.
func (n *Service) config(e *compose.Env) string {
	sync := "# sync_interval: JetStream's default (2m): the page cache holds what a publish acknowledged"
	if s := n.DurabilitySettings(compose.StartProfile(e, n)); s != "" {
		sync = "# durability profile fsync: fsync before every publish acknowledgement\n  " + s
	}
	return fmt.Sprintf(`# written by bench stack up
listen: %s
server_name: inboxbench
# A publish may carry a workload's largest message with its headers.
max_payload: 8MB
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 20GB
  %s
}
`, n.listen(e), e.Path("nats", "data"), sync)
}

// Start writes nats.conf and starts the server.
func (n *Service) Start(ctx context.Context, e *compose.Env) error {
	if err := os.MkdirAll(e.Path("nats", "data"), 0o755); err != nil {
		return err
	}
	conf := e.Path("nats", "nats.conf")
	if err := os.WriteFile(conf, []byte(n.config(e)), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(Binary(e), "-c", conf)
	cmd.Dir = e.Path("nats")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+MemoryLimit, "GOMAXPROCS=2")
	return compose.StartDetached(n.proc(e), cmd)
}

// Ready connects with the configured URL and asks JetStream for the
// account's limits, which fails unless JetStream is on; the version is
// the server's INFO.
func (n *Service) Ready(ctx context.Context, e *compose.Env) (string, error) {
	nc, err := natsbroker.Connect(e.Cfg, "inboxbench-stack-status", natsgo.Timeout(3*time.Second), natsgo.MaxReconnects(0))
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return "", fmt.Errorf("nats at %s: JetStream: %w", n.Addr(e), err)
	}
	return "NATS " + nc.ConnectedServerVersion() + " (JetStream)", nil
}
