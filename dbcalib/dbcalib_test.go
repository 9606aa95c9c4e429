package dbcalib

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results/schema"
	"github.com/inboxbench/inboxbench/workload"
)

func shape(strategy string, parking bool) Shape {
	return Shape{Strategy: strategy, Schema: "ib_twin_test", Consumer: "c", Aggregates: 800, Clients: 4, BatchSize: 50, Parking: parking}
}

// TestScriptsRunTheStrategysStatements: each twin sends the statements
// inbox.Statement names for its strategy, parameters bound, and nothing
// that would leave a $n for pgbench.
func TestScriptsRunTheStrategysStatements(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		parking  bool
		want     []string
		not      []string
	}{
		{"tx", true, []string{"inbox-claim-guarded", "account-create-v1", "account-update", "parked-exists"}, nil},
		{"tx", false, []string{"inbox-claim", "account-create-v1", "account-update"}, []string{"parked-exists"}},
		{"batch", true, []string{"batch-lock", "batch-parked", "batch-inbox-insert", "batch-update"}, nil},
		{"batch", false, []string{"batch-lock", "batch-inbox-insert", "batch-update"}, []string{"batch-parked"}},
	} {
		s := shape(tc.strategy, tc.parking)
		script, err := Script(s)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`\$[0-9]`).MatchString(script) {
			t.Errorf("%s: an unbound parameter is left:\n%s", tc.strategy, script)
		}
		for _, name := range tc.want {
			if !strings.Contains(script, skeleton(t, s.Schema, name)) {
				t.Errorf("%s parking=%v: the script lacks %s:\n%s", tc.strategy, tc.parking, name, script)
			}
		}
		for _, name := range tc.not {
			if strings.Contains(script, skeleton(t, s.Schema, name)) {
				t.Errorf("%s parking=%v: the script sends %s", tc.strategy, tc.parking, name)
			}
		}
	}
}

// skeleton is a statement's text up to its first parameter: what a bound
// copy must start with.
func skeleton(t *testing.T, schema, name string) string {
	q, err := inbox.Statement(schema, name)
	if err != nil {
		t.Fatal(err)
	}
	return q[:strings.Index(q, "$")]
}

func TestShapesATwinCannotRun(t *testing.T) {
	for _, tc := range []struct {
		s    Shape
		want string
	}{
		{Shape{Strategy: "cte", Aggregates: 10, Clients: 1}, "no pgbench twin"},
		{Shape{Strategy: "tx", Aggregates: 3, Clients: 4}, "at least one aggregate"},
		{Shape{Strategy: "batch", Aggregates: 100, Clients: 4, BatchSize: 50}, "raise aggregates to at least 200"},
	} {
		if _, err := Script(tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Script(%+v): %v, want an error containing %q", tc.s, err, tc.want)
		}
	}
	if _, err := bind("SELECT $1, $2", "1"); err == nil {
		t.Error("bind left $2 without a value and said nothing")
	}
}

func TestOptionsValidate(t *testing.T) {
	base := func() *workload.Spec {
		s, err := workload.Load("../workloads/calibrate.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ok := Options{Spec: base(), Strategies: []string{"tx", "batch"}, Compare: []string{ComparePGBench, CompareAudit}, Rounds: 1, Measure: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("the calibrate workload is refused: %v", err)
	}
	for want, mutate := range map[string]func(*Options){
		"faults or snapshots": func(o *Options) { o.Spec.Faults.DuplicateRepublish = 0.1 },
		"key_skew.kind zipf":  func(o *Options) { o.Spec.Skew.Kind = "zipf" },
		KeyRounds + " 0":      func(o *Options) { o.Rounds = 0 },
		KeyCompare + ` "x"`:   func(o *Options) { o.Compare = []string{"x"} },
		"no pgbench twin":     func(o *Options) { o.Strategies = []string{"cte"} },
		"shards 2 < consumers": func(o *Options) {
			o.Spec.Shards = 2
		},
	} {
		o := ok
		o.Spec = base()
		mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Validate() = %v", want, err)
		}
	}
}

func TestSteadyTPS(t *testing.T) {
	progress := "progress: 1.0 s, 100.0 tps, lat 1 ms stddev 0, 0 failed\n" +
		"progress: 2.0 s, 300.0 tps, lat 1 ms stddev 0, 0 failed\nprogress: 3.0 s, 500.0 tps, lat 1 ms stddev 0, 0 failed\n"
	got, err := steadyTPS(progress, 1500*time.Millisecond)
	if err != nil || got != 400 {
		t.Fatalf("steadyTPS = %v, %v; want 400 (the seconds after the warm-up)", got, err)
	}
	if _, err := steadyTPS(progress, 5*time.Second); err == nil {
		t.Fatal("no line after the warm-up must be an error")
	}
}

// TestTwinsRunAsTheStrategies runs each twin briefly through pgbench and
// through the bare pgx loop: no transaction fails and every event moved
// its account one version, as the audit saw it.
func TestTwinsRunAsTheStrategies(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	bin, err := FindPGBench()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cfg.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the schemas are dropped: cleanups run last first
	for _, st := range Twins() {
		for _, ref := range []string{ComparePGBench, ComparePGX} {
			s := shape(st, true)
			s.Schema = "ib_twin_test_" + st + "_" + ref
			if err := Prepare(ctx, pool, s); err != nil {
				t.Fatal(err)
			}
			if err := inbox.InstallAudit(ctx, pool, s.Schema, inbox.AuditStatement); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { inbox.DropSchema(context.Background(), pool, s.Schema) })
			var eps float64
			if ref == ComparePGX {
				run, err := RunLoop(ctx, s, Target{PGURL: cfg.PGURL, Warmup: time.Second, Measure: 2 * time.Second, Local: pool})
				if err != nil {
					t.Fatalf("%s, %s: %v", st, ref, err)
				}
				eps = run.EventsPerS
			} else {
				run, err := RunPGBench(ctx, bin, s, Target{PGURL: cfg.PGURL, Warmup: time.Second, Measure: 2 * time.Second, Local: pool})
				if err != nil || run.Failed != 0 {
					t.Fatalf("%s, %s: %d failed: %v", st, ref, run.Failed, err)
				}
				eps = run.EventsPerS
			}
			n, err := Verify(ctx, pool, s)
			if err != nil {
				t.Fatalf("%s, %s: %v", st, ref, err)
			}
			if eps <= 0 || n == 0 {
				t.Fatalf("%s, %s: %.0f events/s, %d events", st, ref, eps, n)
			}
			// The audit saw the twin's changes as it sees a strategy's.
			snap, err := inbox.ReadSnapshot(ctx, pool, s.Schema, s.Consumer, true)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(snap.Transitions)) != n {
				t.Errorf("%s, %s: %d audited transitions for %d events", st, ref, len(snap.Transitions), n)
			}
		}
	}
}

// TestLoopFailsNamingTheStatement: a loop whose statements cannot run
// (its schema was never prepared) ends with the error, not a rate.
func TestLoopFailsNamingTheStatement(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	s := shape("tx", true)
	s.Schema = "ib_twin_test_missing"
	_, err := RunLoop(context.Background(), s, Target{PGURL: cfg.PGURL, Warmup: time.Second, Measure: time.Second})
	if err == nil || !strings.Contains(err.Error(), "claim") || !strings.Contains(err.Error(), "ib_twin_test_missing") {
		t.Fatalf("got %v, want the claim's error naming the schema", err)
	}
}

// TestCalibrationRuns: a short calibration measures every comparison and
// summarizes each one.
func TestCalibrationRuns(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	spec, err := workload.Parse([]byte("name: calib-test\naggregates: 400\nevents: 1000\nwarmup: 1s\nconsumers: 2\nshards: 2\nbatch_size: 20\nmessage_size: 256\n"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Options{Cfg: cfg, Spec: spec, Strategies: []string{"tx", "batch"},
		Compare: []string{ComparePGBench, ComparePGX, CompareAudit}, Rounds: 1, Measure: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Samples) != 6 || len(rep.Summaries) != 6 {
		t.Fatalf("%d samples, %d summaries: want one of each comparison × strategy", len(rep.Samples), len(rep.Summaries))
	}
	for _, s := range rep.Samples {
		if s.Subject <= 0 || s.Reference <= 0 || s.Ratio <= 0 {
			t.Errorf("%s/%s: %+v", s.Compare, s.Strategy, s)
		}
		if s.Compare == CompareAudit && !strings.Contains(s.Audit, "unlogged") {
			t.Errorf("%s: audit %q: the audited side ran without the audit", s.Strategy, s.Audit)
		}
	}
	// pgbench and the pgx loop of a round are measured against one none
	// cell.
	for _, a := range rep.Samples {
		for _, b := range rep.Samples {
			if a.Compare == ComparePGBench && b.Compare == ComparePGX && a.Strategy == b.Strategy && a.Subject != b.Subject {
				t.Errorf("%s: pgbench's none cell %.0f events/s, pgx's %.0f: want the same cell", a.Strategy, a.Subject, b.Subject)
			}
		}
	}
	// What --json writes is what its schema says.
	p := filepath.Join(t.TempDir(), "calibrate-db.json")
	if err := rep.WriteJSON(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(schema.CalibrateDB, b); err != nil {
		t.Errorf("calibrate-db report does not match %s:\n%v", schema.CalibrateDB, err)
	}
}
