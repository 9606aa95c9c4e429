package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/workload"
)

func runID(prefix string) string { return fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1e9) }

// TestWorkerProcessesSurviveKill9 consumes the faults workload with two
// `bench worker` processes through the real RabbitMQ and Kafka: the crash
// faults kill -9 real processes between commit and ack, the planned
// restart stops one with SIGTERM, and the run must still PASS with every
// event applied once, the kills counted, and the workers' histograms
// merged into the cell.
func TestWorkerProcessesSurviveKill9(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres, testenv.RabbitMQ, testenv.Kafka)
	spec := faultsSpec(t, "")
	plan := workload.Generate(spec)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"rabbitmq", "kafka"}, Strategies: []string{"tx"},
		Output: Output{Dir: t.TempDir()}, RunID: runID("w"), Measure: Measure{Latency: true, Audit: true}, Limits: Limits{Stall: 30 * time.Second},
		Workers: Workers{Local: 2, Cmd: testenv.BenchWorkerCmd(t)}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, c := range run.Cells {
		if c.Invariants.Verdict != "PASS" || c.Error != "" {
			t.Errorf("%s", describe(c))
			continue
		}
		k := c.Counters
		if k.Effects != int64(len(plan.Events)) {
			t.Errorf("%s: %d effects, want %d", c.Broker, k.Effects, len(plan.Events))
		}
		if k.Crashes == 0 || k.Duplicates == 0 {
			t.Errorf("%s: no worker was killed or nothing was deduplicated: %+v", c.Broker, k)
		}
		notes := strings.Join(c.Notes, "\n")
		if !strings.Contains(notes, "killed with SIGKILL") || !strings.Contains(notes, "planned restart 1") {
			t.Errorf("%s: notes do not show the kills and the restart:\n%s", c.Broker, notes)
		}
		if c.Latency.E2E.Count == 0 || c.Latency.Apply.Count < int64(len(plan.Events)) {
			t.Errorf("%s: workers' histograms not merged: e2e %d, apply %d", c.Broker, c.Latency.E2E.Count, c.Latency.Apply.Count)
		}
	}
}

// TestRemoteWorkerJoinsByRunID starts a worker the way a user on another
// machine would — `bench worker --run-id` — before the run exists; the run
// waits for it, it consumes the cell, and it exits 0 when the run ends.
func TestRemoteWorkerJoinsByRunID(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres, testenv.Kafka)
	cmdLine := testenv.BenchWorkerCmd(t)
	id := runID("r")
	var out bytes.Buffer
	w := exec.Command(cmdLine[0], append(cmdLine[1:], "--run-id", id)...)
	w.Env = append(os.Environ(), cfg.Environ()...)
	w.Stdout, w.Stderr = &out, &out
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Process.Kill()
	spec := faultsSpec(t, "")
	spec.Faults = workload.Faults{DuplicateRepublish: 0.1}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"kafka"}, Strategies: []string{"batch"},
		Output: Output{Dir: t.TempDir()}, RunID: id, Measure: Measure{Latency: true, Audit: true}, Workers: Workers{Remote: 1, JoinTimeout: time.Minute}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	c := run.Cells[0]
	if c.Invariants.Verdict != "PASS" || c.Counters.Effects == 0 || c.Counters.Duplicates == 0 {
		t.Errorf("%s", describe(c))
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker exited with %v:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("worker still running 30s after the run finished:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "consuming "+c.Schema) {
		t.Errorf("worker output does not show it consumed the cell:\n%s", out.String())
	}
}

// TestWorkerWithoutRunNamesIt: a worker whose run never appears gives up
// with a message naming the run and what to start first.
func TestWorkerWithoutRunNamesIt(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Work(ctx, WorkerOptions{Cfg: cfg, RunID: "no-such-run", JoinTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), `"no-such-run" not found`) || !strings.Contains(err.Error(), "--remote-workers") {
		t.Fatalf("got %v", err)
	}
}

// TestRunWaitsForMissingWorkers: a run whose remote workers never come
// ends the cell with an error saying how many joined and how to start them,
// before anything is published.
func TestRunWaitsForMissingWorkers(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres, testenv.RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, _, err := Run(ctx, Options{Cfg: cfg, Spec: faultsSpec(t, ""), Brokers: []string{"rabbitmq"}, Strategies: []string{"tx"},
		Output: Output{Dir: t.TempDir()}, RunID: runID("m"), Measure: Measure{Audit: true}, Workers: Workers{Remote: 1, JoinTimeout: time.Second}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	c := run.Cells[0]
	if c.Invariants.Verdict != "ERROR" || !strings.Contains(c.Error, "only 0 of 1 workers joined") || !strings.Contains(c.Error, "bench worker --run-id") {
		t.Fatalf("%s", describe(c))
	}
	if c.Counters.Published != 0 {
		t.Fatalf("published %d events with no consumer", c.Counters.Published)
	}
}
