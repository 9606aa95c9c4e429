// Package services_test builds the example services with their own build
// tools and judges them from outside against the local stack, as a team
// would judge its own (docs/services.md).
package services_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/service"
)

// repoRoot is the module's directory: the bench program runs from it,
// as a user runs it from the checkout.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// bench runs the bench program built for the tests in the checkout.
func bench(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(testenv.BenchWorkerCmd(t)[0], args...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("bench %s: %v", strings.Join(args, " "), err)
		}
	}
	return out
}

// TestExampleSpecsParse: every spec under examples/services is valid.
func TestExampleSpecsParse(t *testing.T) {
	specs, _ := filepath.Glob("*/service*.yaml")
	if len(specs) < 4 {
		t.Fatalf("found %d example specs: %v", len(specs), specs)
	}
	for _, p := range specs {
		if _, err := service.Load(p); err != nil {
			t.Error(err)
		}
	}
}

// TestJavaInboxUnderTest builds the Java example with Maven and puts it
// under test with bench conform on RabbitMQ and Kafka: the correct
// service passes every scenario applied to it; the split variant fails
// reorder with inbox-without-effect; the ack-before-commit variant fails
// consumer-crash and db-connection-kill with lost-effect.
func TestJavaInboxUnderTest(t *testing.T) {
	testenv.Require(t, testenv.Postgres, testenv.RabbitMQ, testenv.Kafka)
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		t.Fatal("maven: not on the PATH; the Java example builds with it (apt-get install maven, or `bench stack up` installs it)")
	}
	build := exec.Command(mvn, "-q", "-B", "package")
	build.Dir = "java-inbox"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("mvn package in examples/services/java-inbox: %v\n%s", err, out)
	}
	dir := "examples/services/java-inbox/"
	out := t.TempDir()
	log := bench(t, "conform", "--brokers", "rabbitmq,kafka", "--scenarios", "consumer-crash,reorder,db-connection-kill,connection-cut",
		"--service", dir+"service.yaml", "--service", dir+"service-split.yaml", "--service", dir+"service-ack-before-commit.yaml",
		"--out", out, "--run-id", "java")
	rows := readConform(t, filepath.Join(out, "java", "conform.json"), log)
	want := map[string]string{ // scenario/strategy → verdict and anomaly
		"consumer-crash/service:java-inbox":                       "PASS",
		"reorder/service:java-inbox":                              "PASS",
		"db-connection-kill/service:java-inbox":                   "PASS",
		"connection-cut/service:java-inbox":                       "PASS",
		"reorder/service:java-inbox-split":                        "FAIL inbox-without-effect",
		"consumer-crash/service:java-inbox-ack-before-commit":     "FAIL lost-effect",
		"db-connection-kill/service:java-inbox-ack-before-commit": "FAIL lost-effect",
	}
	seen := map[string]int{}
	for _, r := range rows {
		k := r.Scenario + "/" + r.Strategy
		seen[k]++
		got := string(r.Verdict)
		for a, n := range r.Anomalies {
			if n > 0 && strings.HasPrefix(want[k], "FAIL "+a) {
				got += " " + a
			}
		}
		if w, ok := want[k]; ok && got != w {
			t.Errorf("%s on %s: %s, want %s (anomalies %v, error %q)", k, r.Broker, got, w, r.Anomalies, r.Error)
		}
		if !r.AsExpected() {
			t.Errorf("%s on %s: %s, expected %s: %s", k, r.Broker, r.Verdict, r.Expected, r.Error)
		}
	}
	for k := range want {
		if seen[k] != 2 {
			t.Errorf("%s ran on %d brokers, want 2\n%s", k, seen[k], log)
		}
	}
}

// TestBenchConsumeAsAService runs the suite's own consumer as a service
// beside the built-in cell on RabbitMQ: both PASS, the service cell's
// effects are every event, and its end-to-end latency was measured from
// the WAL's commit times.
func TestBenchConsumeAsAService(t *testing.T) {
	testenv.Require(t, testenv.Postgres, testenv.RabbitMQ)
	benchPath := testenv.BenchWorkerCmd(t)[0]
	spec, err := os.ReadFile("bench-consume/service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The spec runs the checkout's bin/bench; the test runs the program it
	// built, with the spec otherwise as shipped.
	tmp := t.TempDir()
	text := strings.Replace(string(spec), "../../../bin/bench", benchPath, 1)
	if err := os.WriteFile(filepath.Join(tmp, "service.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	log := bench(t, "run", "--brokers", "rabbitmq", "--workload", "smoke", "--strategies", "tx",
		"--service", filepath.Join(tmp, "service.yaml"), "--out", out, "--run-id", "consume")
	b, err := os.ReadFile(filepath.Join(out, "consume", "result.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	var run results.Run
	if err := json.Unmarshal(b, &run); err != nil {
		t.Fatal(err)
	}
	if len(run.Cells) != 2 {
		t.Fatalf("%d cells, want the tx cell and the service's\n%s", len(run.Cells), log)
	}
	for _, c := range run.Cells {
		if c.Invariants.Verdict != results.VerdictPass {
			t.Errorf("%s/%s: %s %v %s\n%s", c.Broker, c.Strategy, c.Invariants.Verdict, c.Invariants.Anomalies, c.Error, log)
		}
	}
	svc := run.Cells[1]
	if svc.Service == nil || svc.Strategy != "service:bench-consume" {
		t.Fatalf("second cell %s is not the service's", svc.Strategy)
	}
	if svc.Counters.Effects != 1000 || svc.Latency.E2E.Count == 0 || svc.Latency.E2E.P99 <= 0 {
		t.Errorf("service cell: %d effects (want 1000), e2e count %d p99 %dµs: the WAL's commits were not measured", svc.Counters.Effects, svc.Latency.E2E.Count, svc.Latency.E2E.P99)
	}
}

func readConform(t *testing.T, path string, log []byte) []results.ConformRow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	var doc struct {
		Rows []results.ConformRow `json:"rows"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Rows
}
