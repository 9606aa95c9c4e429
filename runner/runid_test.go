package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/render"
	"github.com/inboxbench/inboxbench/workload"
)

func TestRunIDCharacters(t *testing.T) {
	for id, ok := range map[string]bool{"nightly-2026.11.30_a": true, "a/b": false, "../x": false, "a b": false, "x;drop": false,
		strings.Repeat("a", 101): false} {
		if err := validRunID(id); (err == nil) != ok {
			t.Errorf("validRunID(%q) = %v", id, err)
		}
	}
}

// TestUsedRunIDIsRefused: a second run with the same id would judge the
// first run's rows (kept here with KeepData); it is refused naming what
// exists, and --replace runs it on fresh schemas and topics, which it
// drops at its end as its cells passed.
func TestUsedRunIDIsRefused(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres, testenv.RabbitMQ)
	spec, err := workload.Parse([]byte("name: rerun\nseed: 4\naggregates: 5\nevents: 100\nconsumers: 1\nshards: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("Re.run-%d", time.Now().UnixNano()%1e9)
	out := t.TempDir()
	o := Options{Cfg: cfg, Spec: spec, Brokers: []string{"none", "rabbitmq"}, Strategies: []string{"tx"}, Output: Output{Dir: out}, RunID: id,
		Measure: Measure{Audit: true}, Limits: Limits{Stall: 20 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i, replace := range []bool{false, false, true} {
		o.Replace, o.KeepData = replace, !replace
		run, _, err := Run(ctx, o)
		switch {
		case i == 1:
			if !errors.Is(err, ErrRunExists) || !strings.Contains(err.Error(), filepath.Join(out, id)) || !strings.Contains(err.Error(), "schema") {
				t.Fatalf("second run with the same id: %v, want a refusal naming the directory and schemas", err)
			}
			continue
		case err != nil:
			t.Fatalf("run %d: %v", i, err)
		}
		for _, c := range run.Cells {
			if c.Invariants.Verdict != "PASS" || c.Counters.Effects != 100 || c.Counters.Duplicates != 0 {
				t.Errorf("run %d %s", i, describe(c))
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, id, "result.json")); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, left, err := leftovers(ctx, &Options{RunID: id, Output: Output{NoWrite: true}}, conn); err != nil || len(left) > 0 {
		t.Errorf("schemas left by the replacing run, whose cells passed: %v (%v)", left, err)
	}
}

// TestSecretsStayOutOfResults: a command line carrying secrets (a
// password in the PostgreSQL URL, the Kafka SASL password, the RocketMQ
// secret key) is recorded in result.json and the reports with each one
// redacted.
func TestSecretsStayOutOfResults(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec, err := workload.Parse([]byte("name: secrets\naggregates: 3\nevents: 30\n"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"pg-s3cret", "kafka-s3cret", "rmq-s3cret", "dsn-s3cret"}
	args := []string{"bench", "run", "--pg-url", "postgres://app:pg-s3cret@db.example/x", "--kafka-password", "kafka-s3cret",
		"--rocketmq-secret-key=rmq-s3cret", "--pg-url=host=db password=dsn-s3cret"}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, dir, err := Run(ctx, Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: []string{"tx"}, Output: Output{Dir: out, Args: args},
		RunID: runID("s")})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := results.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := render.WriteFiles(dir, rep, render.Outputs(true)); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds %s", e.Name(), s)
			}
		}
	}
	if got := strings.Join(run.Env.CommandArg, " "); !strings.Contains(got, "--kafka-password ***") {
		t.Errorf("command recorded as %q", got)
	}
}
