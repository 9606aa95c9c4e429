package compose

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startSleep starts `sleep 300` in dir (not through StartDetached) and
// kills it at the end of the test.
func startSleep(t *testing.T, dir string) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

func writePID(t *testing.T, p Proc, content string) {
	t.Helper()
	if err := os.WriteFile(p.PIDFile, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fakeProc(t *testing.T, match ...string) Proc {
	dir := t.TempDir()
	home := filepath.Join(dir, "svc")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	return Proc{Name: "svc", PIDFile: filepath.Join(dir, "svc.pid"), LogFile: filepath.Join(dir, "svc.log"), Match: match, Home: home}
}

// TestKillRefusesWhatItDidNotStart: `bench stack down` signals only a
// process that is the service the pid file is for. A pid file holding
// garbage, pid 1 or 0 (whose process groups are every process and our
// own), or the pid of another program, or of the same program run
// elsewhere, is refused: nothing is signalled, the pid file stays, and the
// error names the file and what it found.
func TestKillRefusesWhatItDidNotStart(t *testing.T) {
	foreign := startSleep(t, t.TempDir())
	for name, tc := range map[string]struct {
		match   []string
		content string
		want    []string
	}{
		"other program":   {[]string{"rabbitmq-server"}, strconv.Itoa(foreign), []string{"names pid " + strconv.Itoa(foreign), `"sleep 300"`, "Not signalled"}},
		"ours, elsewhere": {[]string{"sleep"}, strconv.Itoa(foreign), []string{"names pid " + strconv.Itoa(foreign), "working directory", "Not signalled"}},
		"pid 1":           {[]string{"sleep"}, "1\n", []string{`holds "1"`, "not signalled"}},
		"pid 0":           {[]string{"sleep"}, "0", []string{`holds "0"`}},
		"negative":        {[]string{"sleep"}, "-1", []string{`holds "-1"`}},
		"garbage":         {[]string{"sleep"}, "java\x00-jar\n", []string{`holds "java\x00-jar"`}},
		"empty":           {[]string{"sleep"}, "", []string{`holds ""`}},
	} {
		t.Run(name, func(t *testing.T) {
			p := fakeProc(t, tc.match...)
			writePID(t, p, tc.content)
			err := p.Kill(context.Background(), time.Second)
			if err == nil {
				t.Fatal("Kill signalled a process it did not start")
			}
			for _, w := range append(tc.want, p.PIDFile) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if _, statErr := os.Stat(p.PIDFile); statErr != nil {
				t.Errorf("the pid file was removed after a refusal: %v", statErr)
			}
			if _, ours := p.PID(); ours {
				t.Errorf("PID() reports the process as this service")
			}
		})
	}
	if !alive(foreign) {
		t.Fatal("the foreign process was killed")
	}
}

// TestKillStopsItsOwnService: a process StartDetached started in the
// service's home, with the expected command, is stopped and its pid file
// removed; a pid file naming a process that is gone is cleaned up.
func TestKillStopsItsOwnService(t *testing.T) {
	p := fakeProc(t, "sleep")
	cmd := exec.Command("sleep", "300")
	cmd.Dir = p.Home
	if err := StartDetached(p, cmd); err != nil {
		t.Fatal(err)
	}
	pid, ours := p.PID()
	if !ours {
		t.Fatalf("PID() does not recognise the process it started (pid %d): %v", pid, p.Identify(pid))
	}
	if err := p.Kill(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("pid %d still alive after Kill", pid)
	}
	if _, err := os.Stat(p.PIDFile); !os.IsNotExist(err) {
		t.Fatalf("pid file left behind: %v", err)
	}
	writePID(t, p, strconv.Itoa(pid)) // the same pid, now dead
	if err := p.Kill(context.Background(), time.Second); err != nil {
		t.Fatalf("a pid file of a dead process: %v", err)
	}
	if _, err := os.Stat(p.PIDFile); !os.IsNotExist(err) {
		t.Fatalf("stale pid file left behind: %v", err)
	}
}

// TestStartedProcessIsRunningAtOnce: a process just started is running
// and identified as the service, checked at once and every time.
// exec.Cmd.Start returns while the child is still in execve, when
// /proc/PID/cmdline reads empty: 5-7% of reads right after Start on the
// 2-core target, 0.5% after StartDetached's pid file writes. The start-up
// wait judged by the command line and called such a node "exited during
// startup"; it now asks Running, and Identify reads an empty command line
// of a live process again.
func TestStartedProcessIsRunningAtOnce(t *testing.T) {
	p := fakeProc(t, "svc.sh")
	// A start script that stays the parent of its server, as
	// rabbitmq-server does.
	script := filepath.Join(p.Home, "svc.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		cmd := exec.Command(script)
		cmd.Dir = p.Home
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := p.Identify(cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err != nil {
			t.Fatalf("start %d: the process just started is not identified: %v", i, err)
		}
	}
	cmd := exec.Command(script)
	cmd.Dir = p.Home
	if err := StartDetached(p, cmd); err != nil {
		t.Fatal(err)
	}
	if !p.Running() {
		t.Fatal("Running() is false for the process just started")
	}
	if err := p.Kill(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("Running() is true after Kill")
	}
}

// TestKillWaitsForHelpersOutsideTheGroup: a service's helper that left
// its process group (as the Erlang VM's port programs do, in sessions of
// their own) is not reached by the group's SIGTERM; Kill waits for it,
// SIGKILLs it after the grace, and returns only once it is gone.
func TestKillWaitsForHelpersOutsideTheGroup(t *testing.T) {
	p := fakeProc(t, "sleep")
	helperPID := filepath.Join(p.Home, "helper.pid")
	cmd := exec.Command("sh", "-c", "setsid sleep 301 & echo $! > "+helperPID+"; exec sleep 300")
	cmd.Dir = p.Home
	if err := StartDetached(p, cmd); err != nil {
		t.Fatal(err)
	}
	var helper int
	for deadline := time.Now().Add(5 * time.Second); helper == 0; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(helperPID)
		helper, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if time.Now().After(deadline) {
			t.Fatal("the helper did not start")
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(helper, syscall.SIGKILL) })
	// The pid file is written when the shell forks the helper, which may be
	// before the helper's setsid(2) ran: wait for its own session.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		q, _ := readProc(helper)
		if q.sid == helper {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the helper (pid %d) is still in the service's session after 5s: %+v", helper, q)
		}
	}
	start := time.Now()
	if err := p.Kill(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(helper) {
		t.Fatalf("Kill returned after %s with the helper (pid %d) still running", time.Since(start), helper)
	}
}

// TestCommandLineMasksCredentials: what the stack logs of a command it
// ran (RunLogged, a process's start) holds no password, in the forms its
// setup commands take them.
func TestCommandLineMasksCredentials(t *testing.T) {
	cmd := exec.Command("java", "kafka.tools.StorageTool", "format", "--add-scram", "SCRAM-SHA-512=[name=admin,password=Pw-Secret-1]",
		"--url", "postgres://u:Pw-Secret-2@127.0.0.1:1/db")
	if got := CommandLine(cmd); strings.Contains(got, "Secret") || !strings.Contains(got, "name=admin") {
		t.Errorf("CommandLine = %s", got)
	}
}
