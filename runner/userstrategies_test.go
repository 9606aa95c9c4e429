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

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/inbox/strategyfile"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/workload"
)

// noGapSpec has every fault of the plan but idempotency conflicts (the
// example files but one do not declare idempotency keys), and snapshots,
// which a strategy file must handle itself; out_of_order gaps are parked
// by the harness for files as for the built-ins.
func noGapSpec(t *testing.T) *workload.Spec {
	t.Helper()
	s := faultsSpec(t, "snapshot_ratio: 0.05\n")
	s.Name, s.Seed = "test-files", 11
	return s
}

func loadExamples(t *testing.T, names ...string) []inbox.Strategy {
	t.Helper()
	var out []inbox.Strategy
	for _, n := range names {
		s, err := inbox.LoadStrategyFile(filepath.Join("..", "examples", "strategies", n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func runWithExtra(t *testing.T, spec *workload.Spec, strategies []string, extra []inbox.Strategy) Options {
	t.Helper()
	cfg := testenv.Require(t, testenv.Postgres)
	return Options{Cfg: cfg, Spec: spec, Brokers: []string{"none"}, Strategies: strategies, Extra: extra,
		Output: Output{Dir: t.TempDir()}, RunID: fmt.Sprintf("f%d", time.Now().UnixNano()%1e9), Measure: Measure{Latency: true, Audit: true},
		Limits: Limits{Stall: 20 * time.Second}}
}

// TestStrategyFilesCheckedBesideBuiltins: the example files run through
// the same workload and checker as the built-ins, in the same run, gaps
// parked for them; the correct ones pass with one effect per event, the
// split example fails with inbox-without-effect.
func TestStrategyFilesCheckedBesideBuiltins(t *testing.T) {
	spec := noGapSpec(t)
	plan := workload.Generate(spec)
	extra := loadExamples(t, "tx.sql", "cte.sql", "batch.sql", "idempotency.sql", "broken-split.sql")
	o := runWithExtra(t, spec, []string{"tx"}, extra)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, dir, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(run.Cells) != 1+len(extra) {
		t.Fatalf("%d cells, want tx and the %d files", len(run.Cells), len(extra))
	}
	if _, err := os.Stat(filepath.Join(dir, "result.json")); err != nil {
		t.Fatal(err)
	}
	for i, c := range run.Cells {
		want := "tx"
		if i > 0 {
			want = extra[i-1].Name()
		}
		if c.Strategy != want {
			t.Errorf("cell %d is %s, want %s", i, c.Strategy, want)
		}
		// A file's cell names the file and its hash apart, so compare and
		// the trends match it by name (results.Cell.StrategyKey).
		if file := i > 0; file != (c.StrategyHash != "") || (file && c.StrategyKey() != "file:"+c.StrategyFile) {
			t.Errorf("cell %s: strategy_file %q, strategy_hash %q", c.Strategy, c.StrategyFile, c.StrategyHash)
		}
		if c.Strategy == extra[len(extra)-1].Name() {
			if !c.Broken || c.Invariants.Verdict != "FAIL" || c.Invariants.Anomalies[InboxWithoutEffect] == 0 {
				t.Errorf("the split example must FAIL with %s: %s", InboxWithoutEffect, describe(c))
			}
			t.Logf("negative control: %s", describe(c))
			continue
		}
		if c.Broken || c.Invariants.Verdict != "PASS" || c.Error != "" {
			t.Errorf("%s", describe(c))
			continue
		}
		// Every event took effect, or was overtaken by a newer snapshot
		// and decided STALE.
		if k := c.Counters; k.Effects+k.Stale < int64(len(plan.Events)) || k.Duplicates == 0 || k.Crashes == 0 || k.Parked == 0 {
			t.Errorf("%s: %d effects + %d stale (want %d), faults exercised: %+v", c.Strategy, k.Effects, k.Stale, len(plan.Events), k)
		}
	}
}

// TestStrategyFilesRefusedBeforePublishing: a bad file, or a workload that
// reuses idempotency keys for a file that does not declare it handles
// them, fails the run before any cell starts.
func TestStrategyFilesRefusedBeforePublishing(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.sql")
	if err := os.WriteFile(bad, []byte("-- @apply\nSELECT 'APPLIED' AS result FROM {{schema}}.acount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badS, err := inbox.LoadStrategyFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	keys := noGapSpec(t)
	keys.Faults.OutOfOrder, keys.Faults.IdempotencyConflicts = 0, 0.1
	for name, tc := range map[string]struct {
		spec  *workload.Spec
		extra []inbox.Strategy
		want  string
	}{
		"bad SQL":         {noGapSpec(t), []inbox.Strategy{badS}, "bad.sql:2:"},
		"undeclared keys": {keys, loadExamples(t, "tx.sql"), "idempotency-keys: true"},
		"twice":           {noGapSpec(t), loadExamples(t, "tx.sql", "tx.sql"), "given twice"},
	} {
		t.Run(name, func(t *testing.T) {
			o := runWithExtra(t, tc.spec, []string{"tx"}, tc.extra)
			run, _, err := Run(context.Background(), o)
			if !errors.Is(err, strategyfile.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v: want a strategyfile.ErrInvalid mentioning %q", err, tc.want)
			}
			if run != nil {
				t.Fatalf("a run was returned: %+v", run.Cells)
			}
			if entries, _ := os.ReadDir(o.Output.Dir); len(entries) != 0 {
				t.Fatalf("the run directory was written: %v", entries)
			}
		})
	}
}

func TestCellIDKeepsLongNamesApart(t *testing.T) {
	a := cellID("20260102-150405", "kafka-embedded", "file:production-inbox-statement-a.sql@1a2b3c4d")
	b := cellID("20260102-150405", "kafka-embedded", "file:production-inbox-statement-b.sql@5e6f7a8b")
	if a == b || len(a) > 60 || len(b) > 60 {
		t.Fatalf("cell ids %q and %q: want distinct, at most 60 bytes", a, b)
	}
	if got := cellID("r1", "none", "tx"); got != "ib_r1_none_tx" {
		t.Fatalf("short ids must not change: %q", got)
	}
}
