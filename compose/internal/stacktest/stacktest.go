// Package stacktest is what the service packages' tests share: the Env of
// a running variant of the local stack, and a writer to the test log. It
// imports no service package, so their internal tests can use it; each
// such test binary has only its own service registered, so the variant's
// endpoints applied are that service's.
package stacktest

import (
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// ReplicatedEnv is the Env of the replicated stack the tests' stack
// directory holds, after checking every node of services answers (failing
// by name otherwise: `make test` starts the stack for the tests named
// Replicated, which run apart).
func ReplicatedEnv(t *testing.T, services ...string) *compose.Env {
	t.Helper()
	c := core.Config(t)
	dir := core.StackDir(t, c)
	cfg, err := compose.ApplyVariant(c.With("stack.dir", dir).With(compose.SettingTopology, compose.TopologyReplicated))
	if err != nil {
		t.Fatalf("the replicated stack's endpoints: %v", err)
	}
	core.Reachable(t, cfg, compose.VariantFlag(compose.VariantReplicated), services...)
	return &compose.Env{Dir: dir, Variant: compose.VariantReplicated, Cfg: cfg, Out: Writer{t}}
}

// Writer sends the stack's progress lines to the test log.
type Writer struct{ T testing.TB }

// Write logs b, a line at a time as the stack writes them.
func (w Writer) Write(b []byte) (int, error) {
	w.T.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
