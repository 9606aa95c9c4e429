package core

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/config"
)

// StackDir is the local stack's directory as `bench` run from the
// repository root sees it: INBOXBENCH_STACK_DIR when absolute, else that
// path (default .stack) under the module root, not under the test's
// package directory.
func StackDir(t testing.TB, c config.Config) string {
	t.Helper()
	if filepath.IsAbs(c.StackDir) {
		return c.StackDir
	}
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("find the module root for the stack directory %s: %v", c.StackDir, err)
	}
	return filepath.Join(strings.TrimSpace(string(root)), c.StackDir)
}
