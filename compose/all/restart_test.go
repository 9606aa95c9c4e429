package all_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/compose/internal/stacktest"
	"github.com/inboxbench/inboxbench/compose/rabbitmq"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
)

// restartCyclesEnv asks TestStackRestartsBackToBack for that many
// stop/start cycles of the local stack; unset, the test does not run.
const restartCyclesEnv = "INBOXBENCH_TEST_STACK_CYCLES"

// TestStackRestartsBackToBack stops the local stack and starts it again at
// once, several times, and checks every service right after each start:
// `down` must return only once the old instance is gone (no process, no
// listener on its ports, the RabbitMQ node off epmd), and `up` must not
// take a node that is booting for one that exited. It restarts the stack
// every other test uses, so it runs only when restartCyclesEnv asks:
// `make test` does, in its solo stage (nothing else runs then), and the
// stack is running and healthy again when the test ends, even when it
// fails.
func TestStackRestartsBackToBack(t *testing.T) {
	cycles, _ := strconv.Atoi(os.Getenv(restartCyclesEnv))
	if cycles <= 0 {
		testenv.SkipUnlessCI(t, fmt.Sprintf("restarts the local stack: set %s to a number of stop/start cycles (make test runs it alone)", restartCyclesEnv))
	}
	cfg := testenv.Require(t, testenv.Postgres, testenv.RabbitMQ, testenv.Kafka, testenv.RocketMQ, testenv.Redis)
	e := &compose.Env{Dir: testenv.StackDir(t, cfg), Cfg: cfg, Out: stacktest.Writer{T: t}}
	svcs := compose.Services(compose.VariantPlain)
	profiles := map[string]string{}
	for _, s := range svcs {
		if !slices.ContainsFunc(s.Procs(e), func(p compose.Proc) bool { _, ours := p.PID(); return ours }) {
			t.Fatalf("%s at %s was not started by the stack in %s: this test restarts only the services that stack runs", s.Name(), s.Addr(e), e.Dir)
		}
		profiles[s.Name()] = compose.RecordedDurability(e, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		// Leave the stack running for the tests after this one.
		if err := compose.Up(context.Background(), e, svcs); err != nil {
			t.Errorf("the stack could not be started again after the test: %v", err)
		}
	})
	for i := 1; i <= cycles; i++ {
		t0 := time.Now()
		if err := compose.Down(ctx, e, svcs, false); err != nil {
			t.Fatalf("cycle %d: down: %v", i, err)
		}
		down := time.Since(t0)
		for _, s := range svcs {
			for _, p := range s.Procs(e) {
				if p.Running() {
					t.Errorf("cycle %d: %s: process %s is running after down", i, s.Name(), p.Name)
				}
			}
			ls, err := compose.Listeners(e, s)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				if !shared(e, s, int(l.Addr.Port())) { // epmd serves every Erlang node and stays
					t.Errorf("cycle %d: %s: %s still listens after down", i, s.Name(), l)
				}
			}
		}
		if registered, err := (&rabbitmq.Service{}).Registered(ctx); err == nil && registered {
			t.Errorf("cycle %d: epmd still lists the RabbitMQ node after down", i)
		}
		t1 := time.Now()
		if err := compose.Up(ctx, e, svcs); err != nil {
			t.Fatalf("cycle %d: up right after down: %v", i, err)
		}
		up := time.Since(t1)
		for _, r := range compose.Status(ctx, e, svcs) {
			if !r.Healthy {
				t.Errorf("cycle %d: %s is not healthy right after up: %s", i, r.Service, r.Detail)
			}
			if r.Durability != profiles[r.Service] && profiles[r.Service] != "" {
				t.Errorf("cycle %d: %s came back with durability %q, was %q", i, r.Service, r.Durability, profiles[r.Service])
			}
		}
		t.Logf("cycle %d: down %s, up %s", i, down.Round(100*time.Millisecond), up.Round(100*time.Millisecond))
	}
}

// shared reports whether port is one of s's that the host's other
// services share (compose.Port.Shared: epmd).
func shared(e *compose.Env, s compose.Service, port int) bool {
	p, ok := s.(compose.Porter)
	return ok && slices.ContainsFunc(p.Ports(e), func(q compose.Port) bool { return q.Port == port && q.Shared })
}
