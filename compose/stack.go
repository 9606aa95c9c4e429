package compose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/cpuset"
)

// ErrUsage marks errors the user fixes by running something or changing
// configuration (exit code 2), as opposed to a service that failed.
var ErrUsage = errors.New("usage error")

type usageErr struct{ msg string }

// Error is the message as the user reads it.
func (u usageErr) Error() string { return u.msg }

// Is makes errors.Is(err, ErrUsage) find it.
func (u usageErr) Is(target error) bool { return target == ErrUsage }

func usageErrorf(format string, a ...any) error { return usageErr{fmt.Sprintf(format, a...)} }

// EnsurePackages installs missing OS packages with apt-get when running as
// root on Debian/Ubuntu; otherwise it returns a usage error with the exact
// command to run.
func EnsurePackages(ctx context.Context, e *Env, svcs []Service) error {
	var missing []string
	seen := map[string]bool{}
	for _, s := range svcs {
		p, ok := s.(Packager)
		if !ok {
			continue
		}
		for _, pkg := range p.Packages() {
			if !pkg.Found() && !seen[pkg.Deb] {
				seen[pkg.Deb] = true
				missing = append(missing, pkg.Deb)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	cmdline := "apt-get install -y --no-install-recommends " + strings.Join(missing, " ")
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		return usageErrorf("missing packages %s: run\n  sudo apt-get update && sudo %s\nthen run the command again", strings.Join(missing, ", "), cmdline)
	}
	fmt.Fprintf(e.Out, "installing %s with apt-get (log: %s)\n", strings.Join(missing, ", "), e.SharedPath("apt.log"))
	log := e.SharedPath("apt.log")
	if err := RunLogged(ctx, log, exec.CommandContext(ctx, "apt-get", "update", "-q")); err != nil {
		return err
	}
	// Debian's maintainer scripts would start the system-wide RabbitMQ and
	// PostgreSQL services; the stack runs its own instances, so forbid that
	// while installing (policy-rc.d exit 101 = "action not allowed").
	restore, err := denyServiceStarts()
	if err != nil {
		return err
	}
	defer restore()
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-q", "--no-install-recommends"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	return RunLogged(ctx, log, cmd)
}

func denyServiceStarts() (func(), error) {
	const p = "/usr/sbin/policy-rc.d"
	if _, err := os.Stat(p); err == nil {
		return func() {}, nil // someone else's policy: leave it alone
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n# written by inboxbench during apt-get install\nexit 101\n"), 0o755); err != nil {
		return nil, err
	}
	return func() { os.Remove(p) }, nil
}

// Up starts every selected service that is not already healthy, in
// parallel, and waits for protocol-level readiness of each. A healthy
// service is reused, so Up is idempotent.
func Up(ctx context.Context, e *Env, svcs []Service) error {
	if err := os.MkdirAll(e.Path(), 0o755); err != nil {
		return err
	}
	if err := EnsurePackages(ctx, e, svcs); err != nil {
		return err
	}
	if err := reservePorts(e); err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, s := range svcs {
		wg.Add(1)
		go func(s Service) {
			defer wg.Done()
			if err := up(ctx, e, s, &mu); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(s)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func up(ctx context.Context, e *Env, s Service, mu *sync.Mutex) error {
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(e.Out, "%-9s "+format+"\n", append([]any{s.Name()}, a...)...)
	}
	if v, err := ready(ctx, e, s); err == nil {
		from, restart := needsRestart(e, s)
		if !restart {
			if p := RecordedDurability(e, s); p != "" && startedHere(e, s) {
				v += ", durability " + p
			}
			say("already running at %s (%s): reused", s.Addr(e), v)
			return nil
		}
		if !startedHere(e, s) {
			return serviceError(e, s, usageErrorf("runs with durability %q, %q asked for, but this stack did not start it (no live pid file): change its settings yourself", from, e.Durability))
		}
		say("durability %s → %s: restarting", from, e.Durability)
		if err := Down(ctx, &Env{Dir: e.Dir, Variant: e.Variant, Cfg: e.Cfg, Out: io.Discard}, []Service{s}, false); err != nil {
			return serviceError(e, s, err)
		}
	}
	// A cluster with a node down is not ready, and its Start starts the
	// nodes that are not running; anything else running but not
	// answering is stopped by hand.
	if _, cluster := s.(Cluster); !cluster {
		for _, p := range s.Procs(e) {
			if pid, alive := p.PID(); alive {
				return serviceError(e, s, fmt.Errorf("process %s (pid %d) is running but not answering at %s; stop it with `bench stack down %s`", p.Name, pid, s.Addr(e), s.Name()))
			}
		}
	}
	start := time.Now()
	if err := s.Install(ctx, e); err != nil {
		return serviceError(e, s, fmt.Errorf("install: %w", err))
	}
	if d := time.Since(start); d > time.Second {
		say("installed in %s", d.Round(time.Second))
	}
	if err := portsFree(ctx, e, s); err != nil {
		return serviceError(e, s, err)
	}
	if err := s.Start(ctx, e); err != nil {
		return serviceError(e, s, err)
	}
	// A variant's first start wrote what its endpoints need (a password,
	// a CA): the readiness check dials with them.
	if applied, err := ApplyVariant(e.Cfg); err == nil {
		n := *e
		n.Cfg = applied
		e = &n
	}
	timeout := ReadyTimeout(s)
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		v, err := ready(ctx, e, s)
		if err == nil {
			profile := StartProfile(e, s)
			say("ready at %s in %s (%s, durability %s)", s.Addr(e), time.Since(start).Round(100*time.Millisecond), v, profile)
			return recordDurability(e, s, profile)
		}
		last = err
		for _, p := range s.Procs(e) {
			if !p.Running() {
				return serviceError(e, s, fmt.Errorf("process %s exited during startup (last check: %v)", p.Name, err))
			}
		}
		select {
		case <-ctx.Done():
			return serviceError(e, s, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	return serviceError(e, s, fmt.Errorf("not ready after %s: %v", timeout, last))
}

// startedHere reports whether a process of s from this stack's pid files
// is alive.
func startedHere(e *Env, s Service) bool { return len(livePIDs(e, s)) > 0 }

// livePIDs are the pids of s's processes that run, as this stack's pid
// files name them (Proc.PID).
func livePIDs(e *Env, s Service) []int {
	var out []int
	for _, p := range s.Procs(e) {
		if pid, ours := p.PID(); ours {
			out = append(out, pid)
		}
	}
	return out
}

func ready(ctx context.Context, e *Env, s Service) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A client library may quote what it was given (a URL that does not
	// parse, password included): its error is shown by status and up.
	v, err := s.Ready(cctx, e)
	return v, e.Cfg.RedactError(err)
}

// serviceError names the service, the command it ran and the logs to read.
func serviceError(e *Env, s Service, err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed: %v", s.Name(), err)
	for _, p := range s.Procs(e) {
		fmt.Fprintf(&b, "\n  command: %s", p.Command())
	}
	for _, l := range s.Logs(e) {
		fmt.Fprintf(&b, "\n  log:     %s", l)
		if tail := TailFile(l, 5); tail != "" {
			fmt.Fprintf(&b, "\n%s", indent(tail, "    | "))
		}
	}
	text := e.Cfg.RedactSecrets(b.String())
	if errors.Is(err, ErrUsage) {
		return usageErr{text}
	}
	return errors.New(text)
}

// Down stops the selected services' processes that Up started (found by
// their pid files); with wipe it also deletes their data.
func Down(ctx context.Context, e *Env, svcs []Service, wipe bool) error {
	var errs []error
	for i := len(svcs) - 1; i >= 0; i-- { // reverse start order
		s := svcs[i]
		var err error
		if st, ok := s.(Stopper); ok {
			err = st.Stop(ctx, e)
		} else {
			for _, p := range s.Procs(e) {
				err = errors.Join(err, p.Kill(ctx, 30*time.Second))
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: stop: %w", s.Name(), err))
			continue
		}
		fmt.Fprintf(e.Out, "%-9s stopped\n", s.Name())
	}
	if wipe && len(errs) == 0 {
		for _, s := range svcs {
			if w, ok := s.(Wiper); ok {
				for _, d := range w.DataDirs(e) {
					if err := os.RemoveAll(d); err != nil {
						errs = append(errs, err)
					}
				}
				fmt.Fprintf(e.Out, "%-9s data wiped\n", s.Name())
			}
		}
	}
	return errors.Join(errs...)
}

// StatusRow is one line of `bench stack status`.
type StatusRow struct {
	Service, Version, Address string
	Healthy                   bool
	Detail                    string // error when unhealthy, or who runs it
	// Err is why the check failed; a *config.SettingError in it means the
	// service answered and refused the configured settings (TLS,
	// credentials, permissions), which starting it would not change.
	Err error
	// Durability is the profile this stack started the service with, ""
	// when it did not start it.
	Durability string
	// Listening are the service's listening sockets on this host (see
	// Listeners); ListenErr says why they could not be read.
	Listening []Listening
	ListenErr error
	// Nodes are a replicated service's nodes with their roles and health
	// (Cluster); nil for a single-node service.
	Nodes []NodeStatus
	// CPUs are the CPUs a local server may run on ("1 of the host's
	// 0-1") when that is not all of them (started under taskset, say);
	// "" otherwise.
	CPUs string
}

// Refused reports whether the service answered and refused the
// configured settings.
func (r StatusRow) Refused() bool {
	var se *config.SettingError
	return errors.As(r.Err, &se)
}

// Exposed lists the listening addresses reachable from beyond this host
// that no documented reason allows.
func (r StatusRow) Exposed() []Listening {
	var out []Listening
	for _, l := range r.Listening {
		if !l.Loopback() && l.Allowed == "" {
			out = append(out, l)
		}
	}
	return out
}

// Status checks every selected service once, in parallel.
func Status(ctx context.Context, e *Env, svcs []Service) []StatusRow {
	rows := make([]StatusRow, len(svcs))
	var wg sync.WaitGroup
	for i, s := range svcs {
		wg.Add(1)
		go func(i int, s Service) {
			defer wg.Done()
			r := StatusRow{Service: s.Name(), Address: s.Addr(e)}
			if startedHere(e, s) {
				if r.Durability = RecordedDurability(e, s); r.Durability == "" {
					r.Durability = DurabilityStock
				}
			}
			v, err := ready(ctx, e, s)
			r.Version, r.Healthy, r.Err = v, err == nil, err
			if err != nil {
				r.Detail = err.Error()
			} else {
				r.Detail = "external (not started by this stack)"
				for _, p := range s.Procs(e) {
					if pid, ok := p.PID(); ok {
						r.Detail = fmt.Sprintf("local, pid %d", pid)
						if allowed, online, limited := cpuset.Limit(pid); limited {
							r.CPUs = allowed + " of the host's " + online
							r.Detail += ", on CPUs " + r.CPUs
						}
						break
					}
				}
			}
			r.Listening, r.ListenErr = Listeners(e, s)
			if c, ok := s.(Cluster); ok {
				r.Nodes = c.NodeStatus(ctx, e)
			}
			rows[i] = r
		}(i, s)
	}
	wg.Wait()
	return rows
}

// TailFile is the last n lines of the file at path, "" when it cannot be
// read: what an error shows of a log.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// AbsDir resolves the configured stack directory.
func AbsDir(dir string) (string, error) {
	return filepath.Abs(dir)
}
