package compose

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is one detached process of a service: its pid file and log file live
// under the stack directory so `down` stops only what `up` started.
type Proc struct {
	Name    string // e.g. "kafka", "rocketmq-namesrv"
	PIDFile string
	LogFile string
	// Match are strings the process's command line must contain to be
	// this service (its binary or main class), and Home the directory it
	// runs in (or names on its command line): a pid file is only trusted
	// when the process it names is this service of this stack.
	Match []string
	Home  string
}

// StartDetached starts cmd in its own session with stdout and stderr
// appended to p.LogFile, records its pid in p.PIDFile and returns without
// waiting. The process outlives the bench command.
func StartDetached(p Proc, cmd *exec.Cmd) error {
	if err := os.MkdirAll(filepath.Dir(p.LogFile), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.PIDFile), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "\n=== %s starting: %s\n", time.Now().Format(time.RFC3339), CommandLine(cmd))
	cmd.Stdout, cmd.Stderr = log, log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", CommandLine(cmd), err)
	}
	pid := cmd.Process.Pid
	// Reap the child if it exits while we are still running, so a crash
	// during startup is visible as a dead pid rather than a zombie.
	go cmd.Wait() //nolint:errcheck
	if err := os.WriteFile(p.cmdFile(), []byte(CommandLine(cmd)+"\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.PIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

func (p Proc) cmdFile() string { return strings.TrimSuffix(p.PIDFile, ".pid") + ".cmd" }

// Command returns the command line the process was last started with.
func (p Proc) Command() string {
	b, err := os.ReadFile(p.cmdFile())
	if err != nil {
		return "(not started by bench stack)"
	}
	return strings.TrimSpace(string(b))
}

// PID returns the recorded pid, and whether that process is alive and is
// this service (see Identify): a pid file left behind by a process whose
// pid now belongs to something else is not a running service.
func (p Proc) PID() (int, bool) {
	pid, err := p.recorded()
	if err != nil || !alive(pid) {
		return pid, false
	}
	return pid, p.Identify(pid) == nil
}

// recorded reads the pid file: os.ErrNotExist when there is none, an error
// naming the file and its content when it holds no pid above 1 (pid 1 is
// init, and signalling group -1 or 0 would reach every process or our own).
func (p Proc) recorded() (int, error) {
	b, err := os.ReadFile(p.PIDFile)
	if err != nil {
		return 0, err
	}
	text := strings.TrimSpace(string(b))
	pid, err := strconv.Atoi(text)
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s: pid file %s holds %q, not the pid of a process the stack started", p.Name, p.PIDFile, truncate(text, 40))
	}
	return pid, nil
}

// Identify checks that pid is this service: its command line contains
// every Match string, and it runs in Home (or names Home on its command
// line). The error says what the process is instead.
func (p Proc) Identify(pid int) error {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return fmt.Errorf("cannot read its command line: %v", err)
	}
	cmdline := strings.TrimRight(strings.ReplaceAll(string(raw), "\x00", " "), " ")
	cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	ok := true
	for _, m := range p.Match {
		ok = ok && strings.Contains(cmdline, m)
	}
	if p.Home != "" {
		ok = ok && (within(cwd, p.Home) || strings.Contains(cmdline+" ", p.Home+" ") || strings.Contains(cmdline, p.Home+"/"))
	}
	if ok {
		return nil
	}
	return fmt.Errorf("its command line is %q (working directory %q), and %s of this stack runs %s in %s",
		truncate(cmdline, 160), cwd, p.Name, strings.Join(p.Match, " "), p.Home)
}

// within reports whether path is dir or inside it; the kernel reports a
// working directory with symlinks resolved, so dir is compared both ways.
func within(path, dir string) bool {
	if path == "" {
		return false
	}
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		dirs = append(dirs, real)
	}
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie still answers kill(0); treat it as dead.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// groupLeader reports whether pid leads its own process group, as a
// process StartDetached started does (Setsid).
func groupLeader(pid int) bool {
	pgid, err := syscall.Getpgid(pid)
	return err == nil && pgid == pid
}

// Kill stops the recorded process: SIGTERM to its process group, then
// SIGKILL after grace, and removes the pid file. No pid file, or one whose
// process is gone, is not an error. It refuses, signalling nothing and
// keeping the pid file, when the file holds no pid above 1 or names a
// live process that is not this service.
func (p Proc) Kill(ctx context.Context, grace time.Duration) error {
	pid, err := p.recorded()
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: not signalled; delete the file if no %s of this stack is running", err, p.Name)
	case !alive(pid):
		return removeIfExists(p.PIDFile)
	}
	if err := p.Identify(pid); err != nil {
		return fmt.Errorf("%s: pid file %s names pid %d, which is not the %s this stack started: %v. Not signalled: stop it yourself if it is ours, or delete the pid file", p.Name, p.PIDFile, pid, p.Name, err)
	}
	target := pid
	if groupLeader(pid) {
		target = -pid // the service and its children (Setsid)
	}
	_ = syscall.Kill(target, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return removeIfExists(p.PIDFile)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = syscall.Kill(target, syscall.SIGKILL)
	time.Sleep(200 * time.Millisecond)
	if alive(pid) {
		return fmt.Errorf("%s (pid %d) did not stop after SIGKILL", p.Name, pid)
	}
	return removeIfExists(p.PIDFile)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// CommandLine renders cmd for error messages and logs.
func CommandLine(cmd *exec.Cmd) string {
	var b strings.Builder
	for i, a := range cmd.Args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if strings.ContainsAny(a, " \t'\"") {
			b.WriteString(strconv.Quote(a))
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// RunLogged runs cmd to completion, appending its output to logFile; on
// failure the error names the command and the log.
func RunLogged(ctx context.Context, logFile string, cmd *exec.Cmd) error {
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "\n=== %s running: %s\n", time.Now().Format(time.RFC3339), CommandLine(cmd))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s failed (%v); read %s", CommandLine(cmd), err, logFile)
	}
	return nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// loopbackOr is the address a native service binds: the first configured
// one when it is a loopback address (the stack never listens elsewhere),
// else the stack's default.
func loopbackOr(configured []string, def string) string {
	if len(configured) > 0 {
		if h, _, err := net.SplitHostPort(configured[0]); err == nil {
			if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
				return configured[0]
			}
		}
	}
	return def
}
