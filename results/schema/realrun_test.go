package schema_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/inboxbench/inboxbench/brokers/all"
	"github.com/inboxbench/inboxbench/conform"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// TestRunOutputValidates runs `bench run`'s code path (runner.Run, which
// writes result.json) on the database-only baseline with duplicates,
// crashes, reordered versions and a negative control (whose split
// commit shows on the gaps the reordering makes), so the file carries dedup latency,
// anomalies with examples and notes, and validates what it wrote.
func TestRunOutputValidates(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	result, _, _ := compiled(t)
	spec, err := workload.Parse([]byte(`
name: schema-test
seed: 3
aggregates: 10
events: 300
consumers: 2
shards: 2
faults:
  duplicate_republish: 0.1
  crash_after_commit: 0.02
  out_of_order: 0.05
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	run, dir, err := runner.Run(ctx, runner.Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"},
		Strategies: []string{"tx", "broken-split"}, RunID: fmt.Sprintf("schema%d", time.Now().UnixNano()%1e9),
		Output:  runner.Output{Dir: out, Args: []string{"bench", "run"}},
		Measure: runner.Measure{Latency: true, Audit: true}, Limits: runner.Limits{Stall: 20 * time.Second}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	validate(t, "result.json written by runner.Run", result, mustRead(t, filepath.Join(dir, "result.json")))
	if len(run.Cells) != 2 {
		t.Fatalf("%d cells, want 2", len(run.Cells))
	}
	if tx, split := run.Cells[0], run.Cells[1]; tx.Latency.Dedup.Count == 0 || split.Invariants.Verdict != results.VerdictFail {
		t.Errorf("the run did not exercise what it should: tx recorded %d dedup latencies (want some; counters %+v, notes %q), broken-split's verdict is %q (want FAIL; anomalies %v, error %q)",
			tx.Latency.Dedup.Count, tx.Counters, tx.Notes, split.Invariants.Verdict, split.Invariants.Anomalies, split.Error)
	}
}

// TestConformOutputValidates runs `bench conform`'s code path
// (conform.Run, conform.Result, Write) with the article's duplicate and
// order experiments on the database-only baseline, and validates the file.
func TestConformOutputValidates(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	_, schemaConform, _ := compiled(t)
	scs, err := conform.Select([]string{"duplicate", "order"})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := inbox.Lookup("tx")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now().UTC()
	rows := conform.Run(ctx, conform.Options{Env: conform.Env{Cfg: cfg, Out: io.Discard, WorkerCmd: testenv.BenchWorkerCmd(t)},
		Scenarios: scs, Brokers: []string{"none"}, Strategies: []inbox.Strategy{tx}})
	doc := conform.Result(conform.RunInfo{ID: "schema-conform", Started: start, Servers: map[string]string{"postgres": "test"}, Args: []string{"bench", "conform"}}, rows)
	path, err := doc.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	validate(t, "conform.json written by conform.Result", schemaConform, mustRead(t, path))
	if len(rows) != 2 || doc.Summary.Verdict != results.VerdictPass {
		t.Errorf("conformance rows: %+v", rows)
	}
	if e := doc.Env; e.GitCommit == "" || e.Cores == 0 || e.GoVersion == "" || e.Postgres != "test" {
		t.Errorf("conform.json records no environment: %+v", e)
	}
}
