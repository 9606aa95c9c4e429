package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/inbox"
)

// TestErrorPolicy: retryable failures are sent back within the bound,
// permanent ones and those past it are dead-lettered, later versions of a
// dead-lettered event follow at once, and nothing is decided while the
// consumer stops.
func TestErrorPolicy(t *testing.T) {
	ctx := context.Background()
	p := NewErrorPolicy(RetryBound{Attempts: 3, For: time.Hour})
	timeout := inbox.Describe(&pgconn.PgError{Code: "55P03", Message: "lock timeout"})
	if !timeout.Retryable || timeout.Kind != "lock_not_available" {
		t.Fatalf("lock timeout described as %+v", timeout)
	}
	e1 := ev("a", 1, 10)
	for i, want := range []brokers.Verdict{brokers.Retry, brokers.Retry, brokers.Reject} {
		if got := p.Verdict(ctx, "m1", e1, timeout); got != want {
			t.Fatalf("attempt %d: %v, want %v", i+1, got, want)
		}
	}
	e2 := ev("a", 2, 20)
	if got := p.Verdict(ctx, "m2", e2, timeout); got != brokers.Reject {
		t.Fatalf("a successor of a dead-lettered event: %v, want reject", got)
	}
	div := inbox.Describe(&pgconn.PgError{Code: "22012", Message: "division by zero"})
	if got := p.Verdict(ctx, "m3", ev("b", 1, 1), div); got != brokers.Reject || div.Retryable {
		t.Fatalf("division by zero: %v (retryable %v), want an immediate reject", got, div.Retryable)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if got := p.Verdict(stopped, "m4", ev("c", 1, 1), div); got != brokers.Retry {
		t.Fatalf("while stopping: %v, want retry (the next consumer decides)", got)
	}
	fs := p.Failures()
	if len(fs) != 3 || fs[0].Kind == kindPredecessor || fs[len(fs)-1].Kind != kindPredecessor {
		t.Fatalf("failures %+v: want causes first, the consequence last", fs)
	}
	if err := failureError(fs); err == nil || !strings.Contains(err.Error(), "3 deliveries dead-lettered") {
		t.Fatalf("cell error %v", err)
	}
	p.Succeeded("nothing pending") // must not block or panic
	if q := NewErrorPolicy(RetryBound{Attempts: 100, For: time.Nanosecond}); q.Verdict(ctx, "x", e1, timeout) != brokers.Retry {
		t.Fatal("first failure must be retried")
	} else if time.Sleep(time.Millisecond); q.Verdict(ctx, "x", e1, timeout) != brokers.Reject {
		t.Fatal("a retryable failure past its time bound must be dead-lettered")
	}
}

// failingFile writes examples/strategies/tx.sql with its effect changed by
// edit, for a strategy that fails at run time.
func failingFile(t *testing.T, name, old, new string) inbox.Strategy {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", "strategies", "tx.sql"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	if !strings.Contains(src, old) {
		t.Fatalf("tx.sql no longer contains %q", old)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(strings.Replace(src, old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := inbox.LoadStrategyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRuntimeErrorsEndTheCellNamed: SQL that fails for some events at run
// time (division by zero for every version 3; a bigint overflow for one
// aggregate) ends the cell — it does not hang retrying — with the verdict
// ERROR naming the condition, the event and the file's statement.
func TestRuntimeErrorsEndTheCellNamed(t *testing.T) {
	const set = "SET balance = CASE"
	for _, tc := range []struct {
		file, edit, kind, event string
	}{
		{"divzero.sql", "SET balance = 1 / (CASE WHEN :version::bigint = 3 THEN 0 ELSE 1 END) - 1 + CASE", "division_by_zero", "-v3"},
		{"overflow.sql", "SET balance = (CASE WHEN :aggregate_id = 'acct-000004' THEN 9223372036854775807 ELSE 0 END) + CASE", "numeric_value_out_of_range", "acct-000004-v"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			st := failingFile(t, tc.file, set, tc.edit)
			spec := noGapSpec(t)
			spec.Faults = faultsSpec(t, "").Faults
			spec.Faults.OutOfOrder = 0
			o := runWithExtra(t, spec, nil, []inbox.Strategy{st})
			o.Limits.Stall = 2 * time.Minute // a hang would show as a stall error, not as this failure
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			run, _, err := Run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			c := run.Cells[0]
			if c.Invariants.Verdict != "ERROR" || strings.Contains(c.Error, "stalled") {
				t.Fatalf("want ERROR without a stall: %s", describe(c))
			}
			for _, want := range []string{tc.kind, tc.event, "@effect statement 1", tc.file} {
				if !strings.Contains(c.Error, want) {
					t.Errorf("the cell's error does not name %q: %s", want, c.Error)
				}
			}
			if len(c.Failures) == 0 || c.Failures[0].Kind != tc.kind || c.Failures[0].SQLState == "" || c.Counters.Failed == 0 {
				t.Errorf("failures %+v, failed %d", c.Failures, c.Counters.Failed)
			}
		})
	}
}
