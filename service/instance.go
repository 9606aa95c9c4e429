package service

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Instance is one running process of the service (and whatever it
// starts: it leads a process group of its own, and every signal goes to
// the group, so a shell script's java child is stopped with it).
type Instance struct {
	Index int
	spec  *Spec
	env   []string
	log   string // where its stdout and stderr go

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current process ended
	err    error         // how it ended
	starts int
	ready  chan struct{} // closed when the ready line was seen (Log readiness)
}

// NewInstance prepares instance i of s with env (the suite's variables
// and the spec's own), logging to logFile.
func NewInstance(s *Spec, i int, env map[string]string, logFile string) *Instance {
	vars := os.Environ()
	for k, v := range s.Env {
		vars = append(vars, k+"="+v)
	}
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	return &Instance{Index: i, spec: s, env: vars, log: logFile}
}

// Start launches the process and waits until it is ready (the spec's
// ready check) or ctx ends, the timeout passes or the process exits.
func (in *Instance) Start(ctx context.Context) error {
	if err := in.launch(); err != nil {
		return err
	}
	return in.waitReady(ctx)
}

func (in *Instance) launch() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(in.log), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(in.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("instance %d: log: %w", in.Index, err)
	}
	in.starts++
	fmt.Fprintf(f, "--- inboxbench: start %d of instance %d at %s\n", in.starts, in.Index, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(in.program(), in.spec.Command[1:]...)
	cmd.Dir, cmd.Env = in.spec.WorkDir(), in.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	in.ready = make(chan struct{})
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("instance %d: start %s in %s: %w", in.Index, strings.Join(in.spec.Command, " "), cmd.Dir, err)
	}
	in.cmd, in.exited, in.err = cmd, make(chan struct{}), nil
	go in.copyOutput(pr, f, in.ready)
	go func(cmd *exec.Cmd, exited chan struct{}) {
		err := cmd.Wait()
		pw.Close()
		in.mu.Lock()
		in.err = err
		in.mu.Unlock()
		close(exited)
	}(cmd, in.exited)
	return nil
}

// program resolves a relative program path against the working directory.
func (in *Instance) program() string {
	p := in.spec.Command[0]
	if strings.ContainsRune(p, '/') && !filepath.IsAbs(p) {
		return filepath.Join(in.spec.WorkDir(), p)
	}
	return p
}

// copyOutput writes the process's lines to its log and closes ready at
// the first line the ready expression matches.
func (in *Instance) copyOutput(r io.Reader, f *os.File, ready chan struct{}) {
	defer f.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	seen := false
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(f, line)
		if !seen && in.spec.Ready.re != nil && in.spec.Ready.re.MatchString(line) {
			seen = true
			close(ready)
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// waitReady polls the spec's ready check.
func (in *Instance) waitReady(ctx context.Context) error {
	timeout := in.spec.Ready.Timeout.D()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	in.mu.Lock()
	ready, exited := in.ready, in.exited
	in.mu.Unlock()
	for {
		if in.spec.Ready.re == nil && in.probe(ctx) {
			return nil
		}
		select {
		case <-ready:
			return nil
		case <-exited:
			return fmt.Errorf("instance %d exited before it was ready (%v); the end of its output (%s):\n%s", in.Index, in.exitErr(), in.log, in.tail(5))
		case <-deadline.C:
			in.Kill()
			return fmt.Errorf("instance %d not ready after %s (ready: %s); the end of its output (%s):\n%s", in.Index, timeout, in.spec.Ready.describe(), in.log, in.tail(5))
		case <-ctx.Done():
			in.Kill()
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// probe performs one tcp or http check.
func (in *Instance) probe(ctx context.Context) bool {
	r := in.spec.Ready
	subst := func(s string) string { return strings.ReplaceAll(s, "${INSTANCE}", strconv.Itoa(in.Index)) }
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if r.TCP != "" {
		c, err := (&net.Dialer{}).DialContext(cctx, "tcp", subst(r.TCP))
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, subst(r.HTTP), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

func (r Ready) describe() string {
	switch {
	case r.Log != "":
		return "a line matching " + strconv.Quote(r.Log)
	case r.TCP != "":
		return "tcp " + r.TCP
	}
	return "http " + r.HTTP
}

// signal sends sig to the instance's process group; it reports whether a
// live process got it.
func (in *Instance) signal(sig syscall.Signal) bool {
	in.mu.Lock()
	cmd, exited := in.cmd, in.exited
	in.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
	}
	return syscall.Kill(-cmd.Process.Pid, sig) == nil
}

// Kill sends SIGKILL to the instance's processes (kill -9: no shutdown
// hook runs, nothing is flushed) and waits until every process of its
// group is gone (at most a few seconds), so a restarted instance never
// meets its predecessor's connections.
func (in *Instance) Kill() bool {
	in.mu.Lock()
	cmd := in.cmd
	in.mu.Unlock()
	ok := in.signal(syscall.SIGKILL)
	if !ok {
		return false
	}
	<-in.Exited()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		pids := groupPids(cmd.Process.Pid)
		if len(pids) == 0 {
			break
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // a child forked as the signal went out
	}
	return true
}

// Pause stops the instance's processes (SIGSTOP): its connections stay
// open and silent.
func (in *Instance) Pause() bool { return in.signal(syscall.SIGSTOP) }

// Resume continues a paused instance (SIGCONT).
func (in *Instance) Resume() bool { return in.signal(syscall.SIGCONT) }

// Stop asks the instance to exit (SIGTERM, after a SIGCONT in case it was
// paused) and kills it after the spec's grace.
func (in *Instance) Stop() error {
	if !in.signal(syscall.SIGTERM) {
		return nil
	}
	in.signal(syscall.SIGCONT)
	select {
	case <-in.Exited():
		return nil
	case <-time.After(in.spec.StopGrace.D()):
		in.Kill()
		return fmt.Errorf("instance %d did not exit within %s of SIGTERM and was killed", in.Index, in.spec.StopGrace.D())
	}
}

// Exited is closed when the current process ended.
func (in *Instance) Exited() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.exited == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return in.exited
}

func (in *Instance) exitErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err == nil {
		return errors.New("exit status 0")
	}
	return in.err
}

// Pids lists the live processes of the instance's group.
func (in *Instance) Pids() []int {
	in.mu.Lock()
	cmd := in.cmd
	in.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	return groupPids(cmd.Process.Pid)
}

// tail is the last n lines of the instance's log, indented.
func (in *Instance) tail(n int) string {
	time.Sleep(50 * time.Millisecond) // the output copier's last lines
	b, _ := os.ReadFile(in.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    | " + strings.Join(lines, "\n    | ")
}

// Log is the instance's log file.
func (in *Instance) Log() string { return in.log }

// groupPids lists the live processes of process group pgid, from /proc
// (zombies, dead but not yet reaped, are not listed).
func groupPids(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && !zombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}
