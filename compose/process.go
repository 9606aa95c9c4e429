package compose

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inboxbench/inboxbench/config"
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
	cmdline, err := commandLine(pid)
	if err != nil {
		return fmt.Errorf("cannot read its command line: %v", err)
	}
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

// commandLine reads /proc/PID/cmdline. A process in the middle of execve
// reads as empty: the kernel has replaced its memory but not yet set up
// the new program's arguments. exec.Cmd.Start returns in that window (it
// learns of the exec when the old image's descriptors close), so a
// process checked right after it was started can read empty for some
// microseconds; it is read again for up to 100 ms before that counts.
func commandLine(pid int) (string, error) {
	for range 100 {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return "", err
		}
		if len(raw) > 0 || !alive(pid) {
			return strings.TrimRight(strings.ReplaceAll(string(raw), "\x00", " "), " "), nil
		}
		time.Sleep(time.Millisecond)
	}
	return "", nil
}

// WaitListening waits up to d until addr accepts TCP connections, failing
// early, naming p's log, when p exits: a server whose next step (a
// broker's registration, a node joining) needs another to listen.
func WaitListening(ctx context.Context, addr string, p Proc, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(wctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if !p.Running() {
			return fmt.Errorf("%s exited during startup; read %s", p.Name, p.LogFile)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("nothing accepts connections at %s after %s: %v; read %s", addr, d, err, p.LogFile)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Running reports whether the recorded process is alive, without
// identifying it: what a wait for a service just started asks. The pid
// file was written by that start; whether the process is still the one
// started is not in question, and a check of its command line or working
// directory could fail while the program execs or starts up (see
// commandLine), which is not the service having exited.
func (p Proc) Running() bool {
	pid, err := p.recorded()
	return err == nil && alive(pid)
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
// SIGKILL after grace, and removes the pid file. It returns once every
// process of the service is gone: the recorded one and every process of
// its group, session or descent as they were when Kill began (helpers in
// sessions of their own, such as the Erlang VM's port programs, outlive
// the group signal by a moment), so a start that follows finds nothing of
// the old instance. A process still there 10 s after SIGKILL is an error
// naming it. No pid file, or one whose process is gone, is not an error.
// It refuses, signalling nothing and keeping the pid file, when the file
// holds no pid above 1 or names a live process that is not this service.
func (p Proc) Kill(ctx context.Context, grace time.Duration) error {
	pid, err := p.recorded()
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: not signalled; delete the file if no %s of this stack is running", err, p.Name)
	case !alive(pid):
		return RemoveIfExists(p.PIDFile)
	}
	if err := p.Identify(pid); err != nil {
		return fmt.Errorf("%s: pid file %s names pid %d, which is not the %s this stack started: %v. Not signalled: stop it yourself if it is ours, or delete the pid file", p.Name, p.PIDFile, pid, p.Name, err)
	}
	// Taken before the signal: once the leader is gone its children
	// belong to init and no longer point to it.
	tree := processTree([]int{pid})
	target := pid
	if groupLeader(pid) {
		target = -pid // the service and its children (Setsid)
	}
	_ = syscall.Kill(target, syscall.SIGTERM)
	left, err := waitGone(ctx, tree, grace)
	if err != nil || len(left) == 0 {
		return errors.Join(err, RemoveIfExists(p.PIDFile))
	}
	_ = syscall.Kill(target, syscall.SIGKILL)
	for _, q := range left {
		_ = syscall.Kill(q.pid, syscall.SIGKILL) // outside the group; still the one seen (waitGone)
	}
	if left, err = waitGone(ctx, left, killWait); err != nil {
		return err
	}
	if len(left) > 0 {
		var names []string
		for _, q := range left {
			names = append(names, fmt.Sprintf("pid %d (%s)", q.pid, q.comm))
		}
		return fmt.Errorf("%s (pid %d): %s still running %s after SIGKILL", p.Name, pid, strings.Join(names, ", "), killWait)
	}
	return RemoveIfExists(p.PIDFile)
}

// killWait bounds how long Kill waits for processes after SIGKILL.
const killWait = 10 * time.Second

// waitGone waits up to d for every process of ps to be gone (exited, a
// zombie, or its pid now another process's) and returns those that are
// not; an error only when ctx ends.
func waitGone(ctx context.Context, ps []procInfo, d time.Duration) ([]procInfo, error) {
	deadline := time.Now().Add(d)
	for {
		var left []procInfo
		for _, q := range ps {
			if now, ok := readProc(q.pid); ok && now.state != 'Z' && now.start == q.start {
				left = append(left, q)
			}
		}
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left, nil
		}
		ps = left
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// procInfo is a process as /proc/PID/stat shows it.
type procInfo struct {
	pid, ppid, pgrp, sid int
	state                byte
	start                uint64 // clock ticks after boot: a reused pid has another
	comm                 string
}

func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procInfo{}, false
	}
	s := string(b)
	open, i := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || i < open {
		return procInfo{}, false
	}
	// After "pid (comm)": state ppid pgrp session tty_nr tpgid flags
	// minflt cminflt majflt cmajflt utime stime cutime cstime priority
	// nice num_threads itrealvalue starttime …
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, false
	}
	q := procInfo{pid: pid, state: f[0][0], comm: s[open+1 : i]}
	q.ppid, _ = strconv.Atoi(f[1])
	q.pgrp, _ = strconv.Atoi(f[2])
	q.sid, _ = strconv.Atoi(f[3])
	q.start, _ = strconv.ParseUint(f[19], 10, 64)
	return q, true
}

// processTree returns the live processes led by one of leaders: the
// leaders themselves, the members of their process groups and sessions
// (StartDetached starts every service in its own session), and every
// descendant of any of these (a helper that started a session of its
// own).
func processTree(leaders []int) []procInfo {
	if len(leaders) == 0 {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	all := map[int]procInfo{}
	for _, d := range entries {
		if pid, err := strconv.Atoi(d.Name()); err == nil {
			if q, ok := readProc(pid); ok && q.state != 'Z' {
				all[pid] = q
			}
		}
	}
	var in func(q procInfo, depth int) bool
	in = func(q procInfo, depth int) bool {
		if slices.Contains(leaders, q.pid) || slices.Contains(leaders, q.pgrp) || slices.Contains(leaders, q.sid) {
			return true
		}
		parent, ok := all[q.ppid]
		return ok && depth < 64 && in(parent, depth+1)
	}
	var out []procInfo
	for _, q := range all {
		if in(q, 0) {
			out = append(out, q)
		}
	}
	return out
}

// RemoveIfExists removes the file at path; one that is not there is no
// error.
func RemoveIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// CommandLine renders cmd for error messages and logs, its credentials
// masked (config.RedactArgs): a setup command may carry one (Kafka's
// storage format takes its SCRAM users' passwords as arguments), and the
// logs it goes to are read by whoever debugs the stack.
func CommandLine(cmd *exec.Cmd) string {
	var b strings.Builder
	for i, a := range config.RedactArgs(cmd.Args) {
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

// IsExecutable reports whether p is a file someone may execute.
func IsExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// LoopbackOr is the address a native service binds: the first configured
// one when it is a loopback address (the stack never listens elsewhere),
// else the stack's default.
func LoopbackOr(configured []string, def string) string {
	if len(configured) > 0 {
		if h, _, err := net.SplitHostPort(configured[0]); err == nil {
			if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
				return configured[0]
			}
		}
	}
	return def
}
