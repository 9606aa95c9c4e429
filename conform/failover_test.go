package conform

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
)

// TestFailoverScenariosNAOnTheSingleNodeStack: on the single-node stack
// every failover scenario is N/A with the reason (never ERROR, never left
// out), and a broker that runs as no service has nothing to fail over.
// Nothing runs, so no server is needed.
func TestFailoverScenariosNAOnTheSingleNodeStack(t *testing.T) {
	scs, err := Select([]string{"leader-kill", "pg-leader-kill", "leader-kill-weak"})
	if err != nil {
		t.Fatal(err)
	}
	rows := Run(context.Background(), Options{Env: Env{Cfg: config.Default(), StackDir: t.TempDir()}, Scenarios: scs,
		Brokers: []string{"kafka", "none"}, Strategies: strategies(t, "tx")})
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 3 scenarios × 2 brokers", len(rows))
	}
	for _, r := range rows {
		want := "--topology replicated"
		if r.Broker == "none" && r.Scenario != "pg-leader-kill" {
			want = "none runs as no service"
		}
		if r.Verdict != results.VerdictNA || !r.AsExpected() || !strings.Contains(r.Reason, want) {
			t.Errorf("%s/%s: %s (reason %q), want N/A naming %q", r.Scenario, r.Broker, r.Verdict, r.Reason, want)
		}
	}
}

// TestReplicatedFailoverScenarios runs one failover per family on the
// replicated stack (`make test` starts it for the tests named
// Replicated): the Kafka partition leader killed, and the PostgreSQL
// primary killed and its standby promoted, each PASSing with its outage
// measured; and PostgreSQL's weak-setting control (asynchronous
// replication, the standby's WAL receiver stopped before the kill)
// FAILing with lost-effect.
func TestReplicatedFailoverScenarios(t *testing.T) {
	cfg := testenv.Replicated(t, testenv.Postgres, testenv.Kafka)
	env := Env{Cfg: cfg, StackDir: testenv.StackDir(t, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var rows []results.ConformRow
	for _, c := range []struct {
		broker    string
		scenarios []string
	}{{"kafka", []string{"leader-kill"}}, {"none", []string{"pg-leader-kill", "pg-leader-kill-weak"}}} {
		scs, err := Select(c.scenarios)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, Run(ctx, Options{Env: env, Scenarios: scs, Brokers: []string{c.broker}, Strategies: strategies(t, "tx")})...)
	}
	for _, r := range rows {
		if !r.AsExpected() {
			t.Errorf("%s/%s/%s: expected %s, got %s (anomalies %v, error %q, reason %q)", r.Scenario, r.Broker, r.Strategy, r.Expected, r.Verdict, r.Anomalies, r.Error, r.Reason)
			continue
		}
		if len(r.Faults) != 1 || r.Faults[0].Outage == nil || r.Timeline == nil {
			t.Errorf("%s/%s: faults %+v, timeline %v: want the fault with its outage", r.Scenario, r.Broker, r.Faults, r.Timeline != nil)
			continue
		}
		if o := r.Faults[0].Outage; o.PrePublishPerS <= 0 || !o.ConsumeRecovered {
			t.Errorf("%s/%s: outage %+v: want a pre-fault rate and the consumption back", r.Scenario, r.Broker, *o)
		}
		if r.MustShow != "" && (r.MustShow != runner.LostEffect || !strings.Contains(r.Control, "asynchronous")) {
			t.Errorf("%s: control %q must show %q", r.Scenario, r.Control, r.MustShow)
		}
	}
}
