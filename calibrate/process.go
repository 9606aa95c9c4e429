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
	name string   // for errors and the log file: "kafka-producer"
	args []string // java arguments after the launcher, or program's
	// program, when set, is the tool's own executable (a Go program):
	// run with args as they are, which must then hold no secret (it
	// takes them from env).
	program string
	env     []string // NAME=value beside this process's environment
	timeout time.Duration
	// until is called with every stdout line; true stops the tool. A tool
	// with one runs until killed: being stopped, by until or the timeout,
	// is its normal end.
	until func(line string) bool
}

// runTool starts java with t.args and t.env, tees stdout and stderr to
// <logDir>/<name>.log, and returns stdout.
//
// No secret is on the tool's command line, which `ps` shows to every
// user of the host: the arguments (an access key's secret, a key store's
// password) are in an argument file of mode 0600 in r's private
// directory, which the java launcher reads (java @file), and the process
// is `java @file`. The log (mode 0600, in a directory of mode 0700)
// starts with the command line and holds the tool's output, both with
// every secret masked, and so does the error that quotes its tail.
func (r *runner) runTool(ctx context.Context, t toolRun) (string, error) {
	if err := privateDir(r.logDir); err != nil {
		return "", err
	}
	logPath := filepath.Join(r.logDir, t.name+".log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	if err := logf.Chmod(0o600); err != nil { // a log an older version wrote 0644
		return "", err
	}
	program, args := r.java, t.args
	if t.program == "" {
		argfile, err := r.argfile(t.name, t.args)
		if err != nil {
			return "", err
		}
		defer os.Remove(argfile)
		args = []string{"@" + argfile}
	} else {
		program = t.program
	}
	var logMu sync.Mutex
	logLine := func(line string) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintln(logf, r.redact(line))
	}
	logLine("$ " + strings.Join(r.redactArgs(append(append(envPrefix(t.env), program), t.args...)), " "))
	cmd := exec.Command(program, args...)
	cmd.Env = append(os.Environ(), t.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr := &lineWriter{line: logLine}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: start %s: %w", t.name, program, err)
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
	timer := time.AfterFunc(t.timeout, stop)
	defer timer.Stop()
	cancelStop := context.AfterFunc(ctx, stop)
	defer cancelStop()

	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line)
		out.WriteByte('\n')
		logLine(line)
		if t.until != nil && t.until(line) {
			stop()
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	stderr.flush()
	stopMu.Lock()
	wasStopped := stopped
	stopMu.Unlock()
	switch {
	case ctx.Err() != nil:
		return out.String(), ctx.Err()
	case wasStopped && t.until == nil:
		return out.String(), fmt.Errorf("%s: still running after %s: stopped (log: %s)", t.name, t.timeout, logPath)
	case wasStopped:
		return out.String(), nil
	case werr != nil:
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			return out.String(), fmt.Errorf("%s exited with %v; last lines of %s:\n%s", t.name, werr, logPath, r.redact(tail(logPath, 8)))
		}
		return out.String(), werr
	}
	return out.String(), nil
}

// privateDir makes dir (and its parents) and leaves it readable by this
// user only.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// envPrefix is env as the leading NAME=value words of a shell command.
func envPrefix(env []string) []string { return append([]string(nil), env...) }

// lineWriter hands what is written to it to line, a line at a time, so
// that a secret is never split between two writes.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

// Write hands each complete line of p to line, keeping a partial last
// line for the next write.
func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = nil
	}
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
