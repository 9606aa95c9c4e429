package calibrate

import (
	"context"
	"strings"
	"testing"
	"time"

	rabbitdriver "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	rocketdriver "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// secureStackRunner is a runner against the secure stack (`bench stack up
// --secure`), the vendor tool of broker fetched; the test fails when the
// stack is not up.
func secureStackRunner(t *testing.T, broker string) *runner {
	t.Helper()
	cfg := testenv.Secure(t, broker)
	ctx := context.Background()
	java, err := compose.Java(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := testenv.SecureEnv(t, cfg)
	v, _ := vendorFor(broker)
	version, coords := v.fetch()
	cp, err := compose.FetchJavaTool(ctx, e, "calibrate/"+broker, "calibrate-"+broker, version, coords...)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{Options: Options{Cfg: cfg, Shape: DefaultShape(), Duration: 2 * time.Second, MaxDrain: 10 * time.Second, Stack: e},
		java: java, classpath: cp, logDir: t.TempDir()}
	t.Cleanup(r.removePrivate)
	return r
}

// TestSecureVendorToolsVerifyTheServer: against the secure stack, the
// vendor tools whose own default trusts every server certificate
// (PerfTest, the RocketMQ client's TLS test mode) connect with the
// stack's CA and refuse the server when given another CA: they verify
// it, as the drivers do.
func TestSecureVendorToolsVerifyTheServer(t *testing.T) {
	otherCA := testenv.ForeignCA(t)
	t.Run("rabbitmq", func(t *testing.T) {
		r := secureStackRunner(t, "rabbitmq")
		perftest := func(name string) error {
			cmd, env, err := r.perfTestCmd("--producers", "1", "--consumers", "0", "--time", "1", "--id", name)
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.runTool(context.Background(), toolRun{name: name, args: cmd[1:], env: env, timeout: time.Minute})
			return err
		}
		if err := perftest("perftest-stack-ca"); err != nil {
			t.Fatalf("PerfTest with the stack's CA: %v", err)
		}
		r.Cfg = r.Cfg.With(rabbitdriver.SettingCAFile, otherCA)
		r.removePrivate()
		err := perftest("perftest-other-ca")
		if err == nil || !strings.Contains(err.Error(), "PKIX") {
			t.Errorf("PerfTest with another CA: %v; want a refused certificate (PKIX)", err)
		}
	})
	t.Run("rocketmq", func(t *testing.T) {
		r := secureStackRunner(t, "rocketmq")
		// The benchmark Producer prints a line of sent and failed sends a
		// second after its start; the first says whether it connects.
		sends := func(name string) string {
			cmd, err := r.rocketCmd("Producer", "-n", strings.Join(r.Cfg.List(rocketdriver.SettingNamesrv), ";"), "-t", "calib-secure-probe", "-w", "1", "-s", "100", "-ri", "1000")
			if err != nil {
				t.Fatal(err)
			}
			out, _ := r.runTool(context.Background(), toolRun{name: name, args: cmd[1:], timeout: 40 * time.Second,
				until: func(line string) bool { return rmqSendRE.MatchString(line) }})
			for _, l := range strings.Split(out, "\n") {
				if rmqSendRE.MatchString(l) {
					return l
				}
			}
			return ""
		}
		topic := "calib-secure-probe"
		br, cleanup, err := r.openTopic(context.Background(), "rocketmq", topic)
		if err != nil {
			t.Fatal(err)
		}
		_ = br
		defer cleanup()
		if l := sends("rocketmq-stack-ca"); l == "" || strings.Contains(l, "Send TPS: 0 |") {
			t.Fatalf("the benchmark Producer with the stack's CA sent nothing: %q", l)
		}
		r.Cfg = r.Cfg.With(rocketdriver.SettingCAFile, otherCA)
		r.removePrivate()
		if l := sends("rocketmq-other-ca"); l != "" && !strings.Contains(l, "Send TPS: 0 |") {
			t.Errorf("the benchmark Producer with another CA sends: %q", l)
		}
	})
}
