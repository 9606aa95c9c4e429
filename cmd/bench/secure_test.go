package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/internal/testenv"
)

// TestSecureRefusalsEndTheCommand runs bench as a user would against the
// local secure stack with one setting wrong: the command ends with exit
// 2 before any event is published, naming the service and the flag, well
// before its own timeouts (the run's context here: two minutes).
func TestSecureRefusalsEndTheCommand(t *testing.T) {
	cfg := testenv.Secure(t, testenv.Postgres, testenv.RabbitMQ, testenv.Kafka, testenv.RocketMQ)
	t.Setenv("INBOXBENCH_STACK_DIR", testenv.StackDir(t, cfg))
	run1 := []string{"run", "--secure", "--workload", "../../workloads/smoke.yaml", "--out", t.TempDir()}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{append(run1, "--brokers", "kafka", "--kafka-password", "not-it"), []string{"kafka at 127.0.0.1:57092", "--kafka-password / INBOXBENCH_KAFKA_PASSWORD", "refused the scram-sha-512 login"}},
		{append(run1, "--brokers", "rocketmq", "--rocketmq-secret-key", "not-it"), []string{"rocketmq at 127.0.0.1:57876", "--rocketmq-secret-key / INBOXBENCH_ROCKETMQ_SECRET_KEY", "signature"}},
		{append(run1, "--brokers", "rabbitmq", "--rabbitmq-cert-file=", "--rabbitmq-key-file="), []string{"rabbitmq at 127.0.0.1:57671", "--rabbitmq-cert-file / INBOXBENCH_RABBITMQ_CERT_FILE", "requires a client certificate"}},
		{append(run1, "--brokers", "none", "--pg-url", strings.Replace(cfg.PGURL, "verify-full", "disable", 1)), []string{"postgres at 127.0.0.1:57432", "--pg-url / INBOXBENCH_PG_URL", "only over TLS"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var stderr bytes.Buffer
		code := run(ctx, tc.args, &stderr)
		ended := ctx.Err()
		cancel()
		out := stderr.String()
		ok := code == 2 && ended == nil
		for _, w := range tc.want {
			ok = ok && strings.Contains(out, w)
		}
		if !ok {
			t.Errorf("bench %s: exit %d (context %v), stderr %q; want exit 2 saying %q", strings.Join(tc.args, " "), code, ended, out, tc.want)
		}
	}
}
