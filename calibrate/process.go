package calibrate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// toolRun is one run of a vendor tool: a JVM command whose stdout is
// parsed. It ends by itself, when until says the output is enough, or at
// timeout; the last two stop it with SIGTERM (SIGKILL 5 s later).
type toolRun struct {
	name    string   // for errors and the log file: "kafka-producer"
	args    []string // java arguments after the launcher
	timeout time.Duration
	// until is called with every stdout line; true stops the tool. A tool
	// with one runs until killed: being stopped, by until or the timeout,
	// is its normal end.
	until func(line string) bool
}

// runTool starts java with r.args, tees stdout and stderr to
// <logDir>/<name>.log, and returns stdout.
func runTool(ctx context.Context, java, logDir string, r toolRun) (string, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", err
	}
	logPath := filepath.Join(logDir, r.name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "$ %s %s\n", java, strings.Join(r.args, " "))
	cmd := exec.Command(java, r.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var logMu sync.Mutex
	cmd.Stderr = lockedWriter{&logMu, logf}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: start %s: %w", r.name, java, err)
	}
	var (
		out     strings.Builder
		stopped bool
		stopMu  sync.Mutex
	)
	stop := func() {
		stopMu.Lock()
		defer stopMu.Unlock()
		if stopped {
			return
		}
		stopped = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		time.AfterFunc(5*time.Second, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	}
	timer := time.AfterFunc(r.timeout, stop)
	defer timer.Stop()
	cancelStop := context.AfterFunc(ctx, stop)
	defer cancelStop()

	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line)
		out.WriteByte('\n')
		logMu.Lock()
		fmt.Fprintln(logf, line)
		logMu.Unlock()
		if r.until != nil && r.until(line) {
			stop()
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	stopMu.Lock()
	wasStopped := stopped
	stopMu.Unlock()
	switch {
	case ctx.Err() != nil:
		return out.String(), ctx.Err()
	case wasStopped && r.until == nil:
		return out.String(), fmt.Errorf("%s: still running after %s: stopped (log: %s)", r.name, r.timeout, logPath)
	case wasStopped:
		return out.String(), nil
	case werr != nil:
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			return out.String(), fmt.Errorf("%s exited with %v; last lines of %s:\n%s", r.name, werr, logPath, tail(logPath, 8))
		}
		return out.String(), werr
	}
	return out.String(), nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return "  | " + strings.Join(ls, "\n  | ")
}
