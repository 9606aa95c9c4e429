package all_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/compose"
	_ "github.com/inboxbench/inboxbench/compose/all"
	"github.com/inboxbench/inboxbench/compose/postgres"
	"github.com/inboxbench/inboxbench/compose/rabbitmq"
	"github.com/inboxbench/inboxbench/config"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
)

// Every variant's stack has the four services, in the order status shows
// them and Down stops them in reverse; the plain stack has NATS and Redis too.
func TestEveryServiceRegistered(t *testing.T) {
	four := []string{"postgres", "rabbitmq", "kafka", "rocketmq"}
	for _, v := range []string{compose.VariantPlain, compose.VariantReplicated, compose.VariantSecure} {
		want := four
		if v == compose.VariantPlain {
			want = append(slices.Clone(four), "nats", "redis")
		}
		if got := compose.Names(v); !slices.Equal(got, want) {
			t.Errorf("the %q stack's services are %v, want %v", v, got, want)
		}
	}
}

func TestRegisterDuplicatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering kafka twice did not panic")
		}
	}()
	compose.Register("kafka", 99, compose.Variants{})
}

// TestStackListensOnLoopbackOnly checks the running stack as `bench stack
// status` does: every service listens somewhere, and nowhere beyond
// loopback except the documented RocketMQ HA port.
func TestStackListensOnLoopbackOnly(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres, testenv.RabbitMQ, testenv.Kafka, testenv.RocketMQ, testenv.Redis)
	e := &compose.Env{Dir: testenv.StackDir(t, cfg), Cfg: cfg}
	for _, r := range compose.Status(context.Background(), e, compose.Services(compose.VariantPlain)) {
		if r.ListenErr != nil {
			t.Errorf("%s: %v", r.Service, r.ListenErr)
			continue
		}
		if len(r.Listening) == 0 {
			t.Errorf("%s: no listening socket found (stack dir %s)", r.Service, e.Dir)
		}
		for _, l := range r.Exposed() {
			t.Errorf("%s listens beyond loopback on %s", r.Service, l)
		}
		t.Logf("%s: %v", r.Service, r.Listening)
	}
}

// TestStackProcsAreIdentified: every process of the stack names what it
// must be, so no pid file is trusted blindly.
func TestStackProcsAreIdentified(t *testing.T) {
	e := &compose.Env{Dir: t.TempDir()}
	for _, s := range compose.Services(compose.VariantPlain) {
		for _, p := range s.Procs(e) {
			if len(p.Match) == 0 || !strings.HasPrefix(p.Home, e.Dir+"/") {
				t.Errorf("%s: process %s has Match %q and Home %q: both are needed to recognise it", s.Name(), p.Name, p.Match, p.Home)
			}
		}
	}
}

// TestStatusNeverShowsAPassword: endpoints that do not parse (an
// unescaped '%' in the RabbitMQ password, a PostgreSQL URL with two
// ports) show up in `bench stack status` without their passwords, neither
// in the address nor in the error a client library returned.
func TestStatusNeverShowsAPassword(t *testing.T) {
	cfg := config.Default().With(rabbitmqbroker.SettingURL, "amqp://u:Pw-Secret-1%zz@127.0.0.1:1/v")
	cfg.PGURL = "postgres://u:Pw-Secret-2@127.0.0.1:1:2/db"
	e := &compose.Env{Dir: t.TempDir(), Cfg: cfg, Out: io.Discard}
	for _, r := range compose.Status(context.Background(), e, []compose.Service{&rabbitmq.Service{}, &postgres.Service{}}) {
		text := fmt.Sprintf("%s %s %s", r.Address, r.Detail, r.Version)
		if r.Healthy || strings.Contains(text, "Secret") || strings.Contains(text, "%zz") {
			t.Errorf("%s: healthy %v, shown %q", r.Service, r.Healthy, text)
		}
	}
}

// companions are the optional interfaces a replicated service may
// implement beside compose.Cluster (failover uses each it finds).
var companions = map[string]func(compose.Service) bool{
	"Endpointer":      func(s compose.Service) bool { _, ok := s.(compose.Endpointer); return ok },
	"Stopper":         func(s compose.Service) bool { _, ok := s.(compose.Stopper); return ok },
	"NodeStopper":     func(s compose.Service) bool { _, ok := s.(compose.NodeStopper); return ok },
	"FailureDetector": func(s compose.Service) bool { _, ok := s.(compose.FailureDetector); return ok },
	"Promoter":        func(s compose.Service) bool { _, ok := s.(compose.Promoter); return ok },
	"Lagger":          func(s compose.Service) bool { _, ok := s.(compose.Lagger); return ok },
	"Weakener":        func(s compose.Service) bool { _, ok := s.(compose.Weakener); return ok },
}

// Every replicated service is a compose.Cluster whose endpoints every
// command takes, and implements exactly the companions its failover
// relies on: a method whose signature drifted from its interface's
// would silently drop out of failover's view.
func TestEveryClusterAndItsCompanions(t *testing.T) {
	want := map[string][]string{
		"postgres": {"Endpointer", "FailureDetector", "Lagger", "NodeStopper", "Promoter", "Stopper", "Weakener"},
		"rabbitmq": {"Endpointer", "FailureDetector", "NodeStopper", "Stopper", "Weakener"},
		"kafka":    {"Endpointer", "FailureDetector", "NodeStopper", "Stopper", "Weakener"},
		"rocketmq": {"Endpointer", "FailureDetector", "Lagger", "Stopper", "Weakener"},
	}
	for _, s := range compose.Services(compose.VariantReplicated) {
		if _, ok := s.(compose.Cluster); !ok {
			t.Errorf("%s: the replicated stack's service is no compose.Cluster", s.Name())
		}
		var got []string
		for name, is := range companions {
			if is(s) {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want[s.Name()]) {
			t.Errorf("%s implements %v, want %v", s.Name(), got, want[s.Name()])
		}
	}
}
