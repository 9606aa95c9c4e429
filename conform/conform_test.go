package conform

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/inboxbench/inboxbench/brokers/all"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
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
		// none has no broker-side deduplication for a control to rely on.
		if s.Broken() && !inbox.ReliesOnBrokerDedup(s) {
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

// TestExternalScenarios: the external patterns, built in and as a
// strategy file, pass every external-* scenario on the database-only
// baseline, and each negative control fails with the anomaly that names
// its bug.
func TestExternalScenarios(t *testing.T) {
	sts := strategies(t, "ext-key", "ext-lease", "ext-outbox", "broken-ext-new-key", "broken-ext-exists", "broken-ext-after-commit")
	sts = append(sts, files(t, "examples/strategies/external-key.sql")...)
	rows, _ := run(t, []string{"none"}, []string{"external-*"}, sts)
	bug := map[string][]string{
		"broken-ext-new-key":      {runner.ExternalDuplicate},
		"broken-ext-exists":       {runner.ProcessingStuck},
		"broken-ext-after-commit": {runner.ExternalDuplicate, runner.ExternalLost},
	}
	ran := map[string]int{}
	for _, r := range rows {
		if r.Verdict == results.VerdictNA {
			continue
		}
		ran[r.Strategy]++
		names, broken := bug[r.Strategy]
		if !broken {
			continue
		}
		if !slices.ContainsFunc(names, func(n string) bool { return r.Anomalies[n] > 0 }) {
			t.Errorf("%s/%s: %s %v: want it to fail with %v", r.Scenario, r.Strategy, r.Verdict, r.Anomalies, names)
		}
	}
	for _, st := range sts {
		if ran[st.Name()] == 0 {
			t.Errorf("%s ran in no external scenario", st.Name())
		}
	}
	sum := results.Summarize(rows)
	if sum.BrokenTotal != 3 || sum.MutationScore != 1 {
		t.Fatalf("mutation score %d/%d, survivors %v", sum.BrokenCaught, sum.BrokenTotal, sum.Survivors)
	}
}

// TestExternalScenariosAreApart: a database-only strategy runs in no
// external scenario, an external one in no database scenario.
func TestExternalScenariosAreApart(t *testing.T) {
	scs, err := Select([]string{"external-*", "duplicate"})
	if err != nil || len(scs) != 6 || scs[5].Name != "duplicate" {
		t.Fatalf("Select(external-*, duplicate) = %d scenarios, %v", len(scs), err)
	}
	for _, sc := range scs[:5] {
		if !sc.External {
			t.Errorf("%s is not marked External", sc.Name)
		}
	}
	if _, err := Select([]string{"nothing-*"}); err == nil {
		t.Fatal("a pattern that matches nothing was accepted")
	}
	rows := Run(context.Background(), Options{Env: Env{Cfg: testenv.Require(t, testenv.Postgres)}, Scenarios: scs[:1], Brokers: []string{"none"},
		Strategies: strategies(t, "tx")})
	if len(rows) != 0 {
		t.Fatalf("tx ran in %s: %+v", scs[0].Name, rows)
	}
}

func files(t *testing.T, paths ...string) []inbox.Strategy {
	t.Helper()
	var out []inbox.Strategy
	for _, p := range paths {
		s, err := inbox.LoadStrategyFile(filepath.Join("..", p))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestStrategyFilesInEveryScenario: a user's strategy files run in every
// scenario, parked by the harness, on the database-only baseline. A
// correct file written independently of the examples (a MERGE), the batch
// example and the idempotency example pass everywhere or are N/A with a
// reason; a file that dedups with a 100 ms TTL fails with dedup-miss, one
// whose snapshots overwrite newer versions fails in snapshot.
func TestStrategyFilesInEveryScenario(t *testing.T) {
	good := files(t, "runner/testdata/strategies/merge.sql", "examples/strategies/batch.sql", "examples/strategies/idempotency.sql")
	rows, _ := run(t, []string{"none"}, nil, good)
	for _, r := range rows {
		switch {
		case r.Verdict == results.VerdictNA && r.Reason == "":
			t.Errorf("%s/%s is N/A without a reason", r.Scenario, r.Strategy)
		case r.Verdict != results.VerdictPass && r.Verdict != results.VerdictNA:
			t.Errorf("%s/%s: %s", r.Scenario, r.Strategy, r.Verdict)
		case r.Scenario == "idempotency-conflict" && r.Strategy == good[0].Name() && r.Verdict != results.VerdictNA:
			t.Errorf("merge.sql does not declare idempotency keys, yet idempotency-conflict ran: %s", r.Verdict)
		case r.Scenario == "idempotency-conflict" && r.Strategy == good[2].Name() && r.Verdict != results.VerdictPass:
			t.Errorf("idempotency.sql declares idempotency keys: idempotency-conflict must run and pass, got %s", r.Verdict)
		}
	}
	for _, tc := range []struct{ file, scenario, anomaly string }{
		{"runner/testdata/strategies/ttl.sql", "republish-new-message", "dedup-miss"},
		{"runner/testdata/strategies/snapshot-overwrite.sql", "snapshot", "stale-applied"},
	} {
		rows, _ := run(t, []string{"none"}, []string{tc.scenario}, files(t, tc.file))
		if r := rows[0]; r.Verdict != results.VerdictFail || r.Anomalies[tc.anomaly] == 0 {
			t.Errorf("%s in %s: %s %v, want FAIL with %s", tc.file, tc.scenario, r.Verdict, r.Anomalies, tc.anomaly)
		}
	}
}

// TestStrategyFileWithoutConsumerTable: a correct file that writes
// {{schema}}.account instead of {{account}} passes with one consumer, but
// two-consumers gives the audit consumer another table, so the file puts
// both consumers' effects into one. bench conform marks that cell N/A
// with the reason, which names the file, the statement and what to write
// instead; run regardless, the file does not pass the scenario.
func TestStrategyFileWithoutConsumerTable(t *testing.T) {
	st := files(t, "inbox/testdata/strategies/schema-account.sql")
	rows, _ := run(t, []string{"none"}, []string{"duplicate", "two-consumers"}, st)
	if len(rows) != 2 || rows[0].Verdict != results.VerdictPass {
		t.Fatalf("rows %+v: want duplicate to PASS", rows)
	}
	r := rows[1]
	for _, want := range []string{"two-consumers tests " + inbox.FeatureConsumerTables, "schema-account.sql:25:13: @effect statement 1", "{{schema}}.account", "write {{account}} instead"} {
		if r.Verdict != results.VerdictNA || !strings.Contains(r.Reason, want) {
			t.Errorf("two-consumers: %s, reason %q: want N/A saying %q", r.Verdict, r.Reason, want)
		}
	}
	sc, err := Select([]string{"two-consumers"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sc[0].Timeout)
	defer cancel()
	// The audit table stays empty: lost effects (FAIL), or, when the
	// audit consumer's event finds the balance consumer's change in its
	// way first, an effect that changes no row at the version its own
	// table shows (ERROR, dead-lettered).
	out := sc[0].Run(ctx, Cell{Env: &Env{Cfg: testenv.Require(t, testenv.Postgres)}, Scenario: sc[0].Name, Broker: "none", Strategy: st[0]})
	if out.Verdict == results.VerdictPass {
		t.Fatalf("two-consumers run regardless passed the file (%v): the N/A hides nothing", out.Anomalies)
	}
	t.Logf("N/A: %s; run regardless: %s %v %v", r.Reason, out.Verdict, out.Anomalies, out.Err)
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

// TestTransportControls: the transport's negative controls (a correct
// strategy on a driver that settles on receipt) fail with lost-effect in
// crash-with-backlog and ack-lost on kafka-embedded, in process, where
// the correct strategies pass the same scenarios; on none, which has no
// transport, no control runs and crash-with-backlog is N/A.
func TestTransportControls(t *testing.T) {
	sts := append(strategies(t, "tx", "batch"), TransportControls()...)
	rows, _ := run(t, []string{"kafka-embedded", "none"}, []string{"crash-with-backlog", "ack-lost"}, sts)
	ran := 0
	for _, r := range rows {
		control := strings.HasPrefix(r.Strategy, runner.EarlySettle+"/")
		switch {
		case control && r.Broker == "none":
			t.Errorf("%s ran on none, which has no transport", r.Strategy)
		case control && r.Anomalies["lost-effect"] == 0:
			t.Errorf("%s/%s: %s %v: want it to lose effects", r.Scenario, r.Strategy, r.Verdict, r.Anomalies)
		case r.Broker == "none" && r.Scenario == "crash-with-backlog" && r.Verdict != results.VerdictNA:
			t.Errorf("crash-with-backlog/none/%s: %s, want N/A", r.Strategy, r.Verdict)
		}
		if control {
			ran++
		}
	}
	if sum := results.Summarize(rows); ran != 4 || sum.BrokenTotal != 2 || sum.MutationScore != 1 {
		t.Fatalf("%d control rows, mutation score %d/%d, survivors %v: want both controls caught in both scenarios", ran, sum.BrokenCaught, sum.BrokenTotal, sum.Survivors)
	}
}
