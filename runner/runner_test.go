package runner

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	_ "github.com/inboxbench/inboxbench/brokers/all"
	_ "github.com/inboxbench/inboxbench/brokers/none"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// parseSpec parses a workload written for a test.
func parseSpec(t *testing.T, yaml string) *workload.Spec {
	t.Helper()
	s, err := workload.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// faultsSpec is a small workload with every fault of the plan.
func faultsSpec(t *testing.T, extra string) *workload.Spec {
	t.Helper()
	return parseSpec(t, `
name: test-faults
seed: 5
aggregates: 12
events: 600
message_size: 128
consumers: 2
shards: 4
batch_size: 50
faults:
  duplicate_republish: 0.05
  crash_after_commit: 0.01
  consumer_restarts: 1
  out_of_order: 0.05
  concurrent_duplicates: 0.05
  storm_consumers: 3
`+extra)
}

func runCells(t *testing.T, spec *workload.Spec, brokers, strategies []string) *results.Run {
	t.Helper()
	return runCellsAudited(t, spec, brokers, strategies, inbox.AuditStatement)
}

// runCellsAudited runs the cells with the audit log captured as mode.
func runCellsAudited(t *testing.T, spec *workload.Spec, brokers, strategies []string, mode inbox.AuditMode) *results.Run {
	t.Helper()
	cfg := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: brokers, Strategies: strategies,
		Output: Output{Dir: t.TempDir()}, RunID: fmt.Sprintf("t%d", time.Now().UnixNano()%1e9), Measure: Measure{Latency: true, Audit: true, AuditMode: mode},
		Limits: Limits{Stall: 20 * time.Second}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return run
}

func describe(c results.Cell) string {
	return fmt.Sprintf("%s/%s: verdict %s, error %q, anomalies %v, examples %v, counters %+v",
		c.Broker, c.Strategy, c.Invariants.Verdict, c.Error, c.Invariants.Anomalies, c.Invariants.Examples, c.Counters)
}

// TestCorrectStrategiesPassUnderFaults runs every correct strategy through
// the database-only baseline and the in-process Kafka with every fault of
// the plan, and requires a PASS with the faults really exercised.
func TestCorrectStrategiesPassUnderFaults(t *testing.T) {
	spec := faultsSpec(t, "")
	plan := workload.Generate(spec)
	run := runCells(t, spec, []string{"none", "kafka-embedded"}, []string{"tx", "cte", "batch", "pipeline"})
	for _, c := range run.Cells {
		if c.Invariants.Verdict != "PASS" || c.Error != "" {
			t.Errorf("%s", describe(c))
			continue
		}
		if want := inbox.AuditStatement.Describe(); c.Audit != want {
			t.Errorf("%s/%s: audit %q, want %q", c.Broker, c.Strategy, c.Audit, want)
		}
		k := c.Counters
		if k.Effects != int64(len(plan.Events)) {
			t.Errorf("%s/%s: %d effects, want %d (one per event)", c.Broker, c.Strategy, k.Effects, len(plan.Events))
		}
		if k.Duplicates == 0 || k.Crashes == 0 || k.Published != int64(len(plan.Publishes)) {
			t.Errorf("%s/%s: faults not exercised: %+v", c.Broker, c.Strategy, k)
		}
		if c.Latency.E2E.Count == 0 || c.Throughput.EventsPerS <= 0 {
			t.Errorf("%s/%s: no measurements: e2e %+v, %.0f events/s", c.Broker, c.Strategy, c.Latency.E2E, c.Throughput.EventsPerS)
		}
	}
}

// TestNegativeControlsAreCaught proves the checker names the anomaly each
// broken strategy's mistake predicts, with the audit log captured by the
// statement trigger (the default) and by the row trigger: both must see
// every transition.
func TestNegativeControlsAreCaught(t *testing.T) {
	for _, mode := range []inbox.AuditMode{inbox.AuditStatement, inbox.AuditRow} {
		t.Run(string(mode), func(t *testing.T) { negativeControlsCaught(t, mode) })
	}
}

// TestNegativeControlsCaughtFromTheWAL: the same, with the log decoded
// from the write-ahead log. The server must allow logical decoding: the
// local stack runs with wal_level=logical and grants its role REPLICATION
// (a stack started before that must be restarted).
func TestNegativeControlsCaughtFromTheWAL(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	conn, err := pgx.Connect(context.Background(), cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	err = inbox.CheckWALAudit(context.Background(), conn)
	conn.Close(context.Background())
	if err != nil {
		t.Fatalf("%v (restart a stack started before the stack set it: bench stack down postgres && bench stack up postgres)", err)
	}
	negativeControlsCaught(t, inbox.AuditWAL)
}

func negativeControlsCaught(t *testing.T, mode inbox.AuditMode) {
	spec := faultsSpec(t, "")
	for _, tc := range []struct {
		strategy string
		want     []string // at least one of these
	}{
		{"broken-split", []string{InboxWithoutEffect}},
		{"broken-no-version", []string{VersionGap, StaleApplied}},
		{"broken-aggregate-key", []string{LostEffect}},
		{"broken-ack-before-commit", []string{LostEffect}},
		{"broken-check-then-insert", []string{DuplicateEffect}},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			s := spec
			if tc.strategy == "broken-check-then-insert" {
				// Widen the race: many storms of four.
				s = faultsSpec(t, "")
				s.Faults.ConcurrentDuplicates, s.Faults.StormConsumers = 0.5, 4
			}
			run := runCellsAudited(t, s, []string{"none"}, []string{tc.strategy}, mode)
			c := run.Cells[0]
			if c.Audit != mode.Describe() {
				t.Errorf("audit %q, want %q", c.Audit, mode.Describe())
			}
			if c.Invariants.Verdict != "FAIL" || !c.Broken {
				t.Fatalf("negative control not caught: %s", describe(c))
			}
			for _, a := range tc.want {
				if c.Invariants.Anomalies[a] > 0 {
					if len(c.Invariants.Examples[a]) == 0 {
						t.Errorf("%s counted without an example", a)
					}
					return
				}
			}
			t.Fatalf("want one of %v: %s", tc.want, describe(c))
		})
	}
}

// The fault workload through each real broker with the article's strategy
// and the batch strategy. One test per broker: the RocketMQ one runs
// without the race detector (its client library races internally; see the
// Makefile), and every test whose name contains RocketMQ is run that way.
func TestRabbitMQPassesUnderFaults(t *testing.T) { realBrokerPasses(t, testenv.RabbitMQ) }
func TestKafkaPassesUnderFaults(t *testing.T)    { realBrokerPasses(t, testenv.Kafka) }
func TestRocketMQPassesUnderFaults(t *testing.T) { realBrokerPasses(t, testenv.RocketMQ) }

func realBrokerPasses(t *testing.T, broker string) {
	testenv.Require(t, broker)
	spec := faultsSpec(t, "")
	// A RocketMQ consumer crash costs a broker lock expiry before its
	// queues move: keep the crashes few so the tests stay short.
	spec.Faults.CrashAfterCommit = 0.004
	run := runCells(t, spec, []string{broker}, []string{"tx", "batch"})
	for _, c := range run.Cells {
		if c.Invariants.Verdict != "PASS" || c.Error != "" {
			t.Errorf("%s", describe(c))
		}
	}
}

// TestPartitionedInboxUnderFaults: the time-partitioned inbox keeps the
// promise under every fault of the plan, for every correct strategy.
func TestPartitionedInboxUnderFaults(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec := faultsSpec(t, "")
	plan := workload.Generate(spec)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: []string{"tx", "cte", "batch", "pipeline"},
		Output: Output{Dir: t.TempDir()}, RunID: runID("p"), Measure: Measure{Audit: true}, Limits: Limits{Stall: 20 * time.Second},
		Inbox: inbox.Layout{Partitioned: true}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, c := range run.Cells {
		if c.Invariants.Verdict != "PASS" || c.Error != "" || c.Counters.Effects != int64(len(plan.Events)) {
			t.Errorf("%s", describe(c))
		}
		if !slices.Contains(c.Notes, "inbox partitioned by event time") {
			t.Errorf("%s: the cell does not say its inbox was partitioned: %q", c.Strategy, c.Notes)
		}
	}
}

var removedRE = regexp.MustCompile(`(removed |partitions \()[12][0-9]{4} inbox rows`)

// TestInboxAtProductionSize: a cell whose inbox is prefilled with history
// and pruned beside the stream, on both layouts, still applies every event
// once (retention never touches the run's own rows, nor refuses its
// events on the partitioned layout), and says what it loaded and pruned.
func TestInboxAtProductionSize(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec := parseSpec(t, `
name: inbox-size
aggregates: 50
events: 6000
consumers: 4
shards: 4
message_size: 128
inbox_prefill: 30000
inbox_prefill_age: 30d
inbox_prune_every: 1s
inbox_prune_keep: 7d
`)
	for _, partitioned := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: []string{"tx"},
			Output: Output{Dir: t.TempDir(), NoWrite: true}, RunID: runID("size"), Measure: Measure{Audit: true}, Limits: Limits{Stall: 20 * time.Second},
			Inbox: inbox.Layout{Partitioned: partitioned}})
		cancel()
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		c := run.Cells[0]
		if c.Invariants.Verdict != "PASS" || c.Error != "" || c.Counters.Effects != int64(spec.Events) {
			t.Errorf("partitioned=%v: %s", partitioned, describe(c))
		}
		var prefilled, pruned bool
		for _, n := range c.Notes {
			prefilled = prefilled || strings.HasPrefix(n, "inbox prefilled with 30000 rows")
			// 7 of the 30 days are kept: most of the history goes.
			pruned = pruned || (strings.HasPrefix(n, "retention ran beside the stream") && removedRE.MatchString(n))
		}
		if !prefilled || !pruned {
			t.Errorf("partitioned=%v: the notes do not say what was prefilled and pruned: %q", partitioned, c.Notes)
		}
	}
}
