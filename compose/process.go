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

// PID returns the recorded pid if that process is alive.
func (p Proc) PID() (int, bool) {
	b, err := os.ReadFile(p.PIDFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if !alive(pid) {
		return pid, false
	}
	return pid, true
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

// Kill stops the recorded process group: SIGTERM, then SIGKILL after grace.
// It removes the pid file. A missing or dead process is not an error.
func (p Proc) Kill(ctx context.Context, grace time.Duration) error {
	pid, ok := p.PID()
	defer os.Remove(p.PIDFile)
	if !ok {
		return nil
	}
	// The process leads its own session (Setsid), so signal the group.
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	time.Sleep(200 * time.Millisecond)
	if alive(pid) {
		return fmt.Errorf("%s (pid %d) did not stop after SIGKILL", p.Name, pid)
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
