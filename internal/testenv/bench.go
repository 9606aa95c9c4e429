package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	benchOnce sync.Once
	benchPath string
	benchErr  error
)

// BenchWorkerCmd builds the bench program once per test binary and returns
// the command that starts a `bench worker` with it: tests of worker
// processes kill and start real processes of the real program.
func BenchWorkerCmd(t testing.TB) []string {
	t.Helper()
	benchOnce.Do(func() {
		var root []byte
		root, benchErr = exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
		if benchErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "inboxbench-bin-")
		if err != nil {
			benchErr = err
			return
		}
		benchPath = filepath.Join(dir, "bench")
		cmd := exec.Command("go", "build", "-o", benchPath, "./cmd/bench")
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			benchErr = &buildError{err: err, out: string(out)}
		}
	})
	if benchErr != nil {
		t.Fatalf("build the bench program for worker processes: %v", benchErr)
	}
	return []string{benchPath, "worker"}
}

type buildError struct {
	err error
	out string
}

// Error is the build's error and its output.
func (b *buildError) Error() string { return b.err.Error() + ": " + b.out }
