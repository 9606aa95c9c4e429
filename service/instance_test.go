package service

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testSpec(t *testing.T, script, ready string) *Spec {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	y := "name: t\ncommand: [./run.sh]\nready: {log: '" + ready + "', timeout: 5s}\nstop_grace: 1s\neffects: {table: account, aggregate: id, state: balance, version: version}\n"
	s, err := Parse([]byte(y), filepath.Join(dir, "service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInstanceLifecycle starts a script that prints its environment and a
// ready line and then waits, pauses and resumes it, and kills it: the
// whole process group goes (the script's sleep child too).
func TestInstanceLifecycle(t *testing.T) {
	s := testSpec(t, "echo consumer=$INBOXBENCH_CONSUMER; sleep 30 & echo ready; wait\n", "^ready$")
	log := filepath.Join(t.TempDir(), "i0.log")
	in := NewInstance(s, 0, map[string]string{"INBOXBENCH_CONSUMER": "balance-x"}, log)
	if err := in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pids := in.Pids()
	if len(pids) < 2 {
		t.Fatalf("process group %v: want the script and its sleep", pids)
	}
	if !in.Pause() || !in.Resume() {
		t.Fatal("pause/resume of a live instance failed")
	}
	if !in.Kill() {
		t.Fatal("kill of a live instance failed")
	}
	for _, pid := range pids {
		if !zombie(pid) {
			t.Errorf("pid %d of the group survived the kill", pid)
		}
	}
	b, _ := os.ReadFile(log)
	if !strings.Contains(string(b), "consumer=balance-x") {
		t.Errorf("log %q lacks the environment the suite handed", b)
	}
	// A second start appends to the same log, after a marker.
	if err := in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(log); strings.Count(string(b), "--- inboxbench: start") != 2 {
		t.Errorf("log after two starts:\n%s", b)
	}
}

func TestInstanceNotReady(t *testing.T) {
	s := testSpec(t, "echo starting; exit 3\n", "^ready$")
	in := NewInstance(s, 1, nil, filepath.Join(t.TempDir(), "i1.log"))
	err := in.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err %v", err)
	}
	s = testSpec(t, "sleep 30\n", "^ready$")
	s.Ready.Timeout = s.Ready.Timeout / 10
	in = NewInstance(s, 2, nil, filepath.Join(t.TempDir(), "i2.log"))
	start := time.Now()
	err = in.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not ready after") || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
}

// TestLocalPorts finds this process's own connection to a listener.
func TestLocalPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := l.Addr().(*net.TCPAddr).Port
	got, err := LocalPorts([]int{os.Getpid()}, port)
	if err != nil {
		t.Fatal(err)
	}
	want := c.LocalAddr().(*net.TCPAddr).Port
	if len(got) != 1 || got[0] != want {
		t.Fatalf("LocalPorts = %v, want [%d]", got, want)
	}
}
