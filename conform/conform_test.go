package conform

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	_ "github.com/inboxbench/inboxbench/brokers/all"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
)

func strategies(t *testing.T, names ...string) []inbox.Strategy {
	t.Helper()
	var out []inbox.Strategy
	for _, n := range names {
		s, err := inbox.Lookup(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func run(t *testing.T, brokers, scenarios []string, sts []inbox.Strategy) ([]results.ConformRow, string) {
	t.Helper()
	cfg := testenv.Require(t, testenv.Postgres)
	scs, err := Select(scenarios)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rows := Run(ctx, Options{Env: Env{Cfg: cfg, Out: &out, WorkerCmd: testenv.BenchWorkerCmd(t)}, Scenarios: scs, Brokers: brokers, Strategies: sts})
	for _, r := range rows {
		if !r.AsExpected() {
			t.Errorf("%s/%s/%s: expected %s, got %s (anomalies %v, error %q)", r.Scenario, r.Broker, r.Strategy, r.Expected, r.Verdict, r.Anomalies, r.Error)
		}
	}
	return rows, out.String()
}

// TestArticleLines runs the article's four experiments through RabbitMQ
// (the article's broker) and prints exactly the article's lines.
func TestArticleLines(t *testing.T) {
	testenv.Require(t, testenv.RabbitMQ)
	_, out := run(t, []string{"rabbitmq"}, []string{"duplicate", "split", "concurrent", "order"},
		strategies(t, "tx", "broken-split"))
	for _, want := range []string{
		"duplicate: redelivered=true duplicateSkipped=true balance=10 inbox=1",
		"split: redelivered=true duplicateSkipped=true balance=0 inbox=1",
		"concurrent: applied=1 duplicate=1 balance=10 inbox=1",
		"order: gapRejected=true recoveredVersion=2 duplicateSkipped=true staleRejected=true balance=30 inbox=2",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing the article's line %q in:\n%s", want, out)
		}
	}
}

// TestEveryNegativeControlIsCaught: the mutation score over the
// database-only baseline must be 100%, and the correct strategy must pass
// the same scenarios.
func TestEveryNegativeControlIsCaught(t *testing.T) {
	var sts []inbox.Strategy
	for _, s := range inbox.Strategies() {
		if s.Broken() {
			sts = append(sts, s)
		}
	}
	sts = append(sts, strategies(t, "tx")...)
	rows, _ := run(t, []string{"none"}, nil, sts)
	sum := results.Summarize(rows)
	if sum.BrokenTotal != len(sts)-1 || sum.MutationScore != 1 {
		t.Fatalf("mutation score %d/%d, survivors %v: every negative control must be caught", sum.BrokenCaught, sum.BrokenTotal, sum.Survivors)
	}
}

// TestFaultScenariosOnKafka runs the production faults through the real
// Kafka with the batch strategy, consumer-crash with real worker processes
// killed by kill -9.
func TestFaultScenariosOnKafka(t *testing.T) {
	testenv.Require(t, testenv.Kafka)
	rows, _ := run(t, []string{"kafka"}, []string{"ack-lost", "reorder", "duplicate-storm", "idempotency-conflict", "db-connection-kill", "poison", "consumer-crash"},
		strategies(t, "batch"))
	requireKills(t, rows)
}

// TestConsumerCrashOnRocketMQ kills worker processes consuming RocketMQ's
// orderly queues: their queue locks must pass to the replacement without
// loss, and the negative control must be caught.
func TestConsumerCrashOnRocketMQ(t *testing.T) {
	testenv.Require(t, testenv.RocketMQ)
	rows, _ := run(t, []string{"rocketmq"}, []string{"consumer-crash"}, strategies(t, "tx", "broken-ack-before-commit"))
	requireKills(t, rows)
}

// requireKills checks that consumer-crash really killed processes.
func requireKills(t *testing.T, rows []results.ConformRow) {
	t.Helper()
	for _, r := range rows {
		if r.Scenario == "consumer-crash" && !r.Broken && !strings.Contains(strings.Join(r.Notes, "\n"), "killed with SIGKILL") {
			t.Errorf("consumer-crash/%s/%s: no worker process was killed: notes %q", r.Broker, r.Strategy, r.Notes)
		}
	}
}
