package dbcalib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	_ "github.com/inboxbench/inboxbench/brokers/none" // the baseline driver every calibration cell runs on

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// Comparisons a calibration can make.
const (
	// ComparePGBench: a `bench run --brokers none` cell against pgbench
	// running the strategy's twin (goal: none ≥ 95% of pgbench).
	ComparePGBench = "pgbench"
	// ComparePGX: the same none cell against the twin's statements sent
	// by a bare pgx loop in this process (pgxloop.go): the harness's own
	// cost over its database driver (goal: none ≥ 95% of the loop).
	ComparePGX = "pgx"
	// CompareAudit: the same none cell with the audit log and without
	// (goal: audited ≥ 97% of unaudited).
	CompareAudit = "audit"
	// ComparePrefill: the none cell with the workload's inbox_prefill
	// against the same cell on an empty inbox (no goal: what a big inbox
	// costs).
	ComparePrefill = "prefill"
	// ComparePrune: the prefilled cell with the workload's retention
	// running beside it (inbox_prune_every) against without (no goal).
	ComparePrune = "prune"
)

// Comparisons lists every comparison, in the order a round runs them.
var Comparisons = []string{ComparePGBench, ComparePGX, CompareAudit, ComparePrefill, ComparePrune}

// Goals are the ratios each comparison must reach; the inbox-size
// comparisons are measurements with no goal.
var Goals = map[string]float64{ComparePGBench: 0.95, ComparePGX: 0.95, CompareAudit: 0.97, ComparePrefill: 0, ComparePrune: 0}

// Options of a calibration.
type Options struct {
	Cfg        config.Config
	Spec       *workload.Spec
	Strategies []string
	Compare    []string
	// Rounds repeats every measurement, interleaved: on a shared machine
	// only ratios measured side by side mean anything.
	Rounds int
	// Measure is the measured time of each pgbench run and none cell,
	// after the workload's warm-up (none cells are sized to last about
	// that long from a short pilot cell).
	Measure time.Duration
	// Audit is the audit of both sides of the pgbench comparison (off:
	// neither side has one; auto resolves as bench run does).
	Audit inbox.AuditMode
	// ABMode is the audit the audit comparison measures against none
	// (zero: auto, what bench run installs by default).
	ABMode inbox.AuditMode
	// InboxLayout is the layout of every none cell's inbox.
	InboxLayout inbox.Layout
	PGBench     string // the pgbench binary; FindPGBench when empty
	Progress    io.Writer
}

// Sample is one side-by-side measurement.
type Sample struct {
	Round    int    `json:"round"`
	Compare  string `json:"compare"`
	Strategy string `json:"strategy"`
	// Subject is the measured side (the none cell; the audited cell),
	// Reference the other (pgbench; the unaudited cell), in events/s.
	Subject   float64 `json:"subject_events_per_s"`
	Reference float64 `json:"reference_events_per_s"`
	Ratio     float64 `json:"ratio"`
	Audit     string  `json:"audit"`
	// HostCPUBusy is the host's busy share during the none cell(s).
	HostCPUBusy float64 `json:"host_cpu_busy"`
	// SubjectP99 and ReferenceP99 are the none cells' end-to-end p99, and
	// the Apply ones their inbox transaction's p99, in µs (0 for pgbench).
	SubjectP99        int64 `json:"subject_e2e_p99_us,omitempty"`
	ReferenceP99      int64 `json:"reference_e2e_p99_us,omitempty"`
	SubjectApplyP99   int64 `json:"subject_apply_p99_us,omitempty"`
	ReferenceApplyP99 int64 `json:"reference_apply_p99_us,omitempty"`
	// SubjectCPU and ReferenceCPU are each side's CPU per event (cpu.go),
	// when the server runs on this host; CPURatio is reference over
	// subject: the throughput ratio a machine with nothing else to do
	// would show.
	SubjectCPU   *CPU    `json:"subject_cpu,omitempty"`
	ReferenceCPU *CPU    `json:"reference_cpu,omitempty"`
	CPURatio     float64 `json:"cpu_ratio,omitempty"`
}

// Summary is a comparison's ratio over the rounds.
type Summary struct {
	Compare  string  `json:"compare"`
	Strategy string  `json:"strategy"`
	Median   float64 `json:"median"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	Rounds   int     `json:"rounds"`
	Goal     float64 `json:"goal"`
	Met      bool    `json:"met"`
	// CPUMedian, CPUMin and CPUMax are the CPU-per-event ratios (0 when
	// not sampled).
	CPUMedian float64 `json:"cpu_median,omitempty"`
	CPUMin    float64 `json:"cpu_min,omitempty"`
	CPUMax    float64 `json:"cpu_max,omitempty"`
}

// SchemaVersion is the shape version of the JSON report (--json),
// results/schema/calibrate-db.schema.json; bumped on an incompatible change.
const SchemaVersion = 1

// Report is a calibration's outcome.
type Report struct {
	SchemaVersion int            `json:"schema_version"`
	StartedAt     time.Time      `json:"started_at"`
	Env           results.Env    `json:"env"`
	Workload      *workload.Spec `json:"workload"`
	Events        map[string]int `json:"events"` // events of each strategy's none cells
	Samples       []Sample       `json:"samples"`
	Summaries     []Summary      `json:"summaries"`
	// PGBench is each twin's pgbench command line (the URL left out).
	PGBench map[string][]string `json:"pgbench,omitempty"`
	Scripts map[string]string   `json:"scripts,omitempty"`
}

// Validate checks what a calibration needs before anything runs; its
// errors name the option or workload field.
func (o *Options) Validate() error {
	s := o.Spec
	switch {
	case s == nil:
		return errors.New("no workload")
	case o.Rounds < 1:
		return fmt.Errorf("--rounds %d: at least 1", o.Rounds)
	case o.Measure < time.Second:
		return fmt.Errorf("--duration %s: at least 1s", o.Measure)
	case len(o.Strategies) == 0:
		return errors.New("--strategies: name at least one")
	case s.Faults != (workload.Faults{StormConsumers: s.Faults.StormConsumers}) || s.SnapshotRatio != 0:
		return fmt.Errorf("workload %s has faults or snapshots: a calibration runs fresh increments only (the twins' stream); use workloads/calibrate.yaml or a workload without them", s.Name)
	case s.Skew.Kind != "uniform":
		return fmt.Errorf("workload %s: key_skew.kind %s: the twins spread events evenly over each consumer's aggregates; use uniform", s.Name, s.Skew.Kind)
	case s.Shards < s.Consumers:
		return fmt.Errorf("workload %s: shards %d < consumers %d: some consumers would sit idle while every pgbench client works; use shards >= consumers", s.Name, s.Shards, s.Consumers)
	case s.PublishRate != 0:
		return fmt.Errorf("workload %s: publish_rate %v: a calibration measures saturated throughput; set 0", s.Name, s.PublishRate)
	}
	for _, c := range o.Compare {
		if _, ok := Goals[c]; !ok {
			return fmt.Errorf("--compare %q: accepted values are %s", c, strings.Join(Comparisons, ", "))
		}
	}
	switch {
	case slices.Contains(o.Compare, ComparePrefill) && s.InboxPrefill == 0:
		return fmt.Errorf("--compare prefill: workload %s sets no inbox_prefill: give a workload that does (e.g. workloads/inbox-10m.yaml)", s.Name)
	case slices.Contains(o.Compare, ComparePrune) && s.InboxPruneEvery == 0:
		return fmt.Errorf("--compare prune: workload %s sets no inbox_prune_every: give a workload that does (e.g. workloads/inbox-10m.yaml)", s.Name)
	}
	for _, st := range o.Strategies {
		if _, err := inbox.Lookup(st); err != nil {
			return err
		}
		if slices.Contains(o.Compare, ComparePGBench) || slices.Contains(o.Compare, ComparePGX) {
			if err := o.shape(st).check(); err != nil {
				return fmt.Errorf("--strategies %s: %w", st, err)
			}
		}
	}
	return nil
}

func (o *Options) shape(strategy string) Shape {
	return Shape{Strategy: strategy, Schema: "ib_calibrate_twin_" + strategy, Consumer: "balance-twin",
		Aggregates: o.Spec.Aggregates, Clients: o.Spec.Consumers, BatchSize: o.Spec.BatchSize, Parking: o.Spec.ParkingOn()}
}

// calibration is one Run's working state.
type calibration struct {
	o     *Options
	pool  *pgxpool.Pool
	local bool // the server's processes are on this host: CPU is sampled
	rep   *Report
	seq   int
}

// Run measures every comparison for every strategy, Rounds times,
// interleaved, and summarizes the ratios.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if slices.Contains(o.Compare, ComparePGBench) && o.PGBench == "" {
		bin, err := FindPGBench()
		if err != nil {
			return nil, err
		}
		o.PGBench = bin
	}
	pool, err := pgxpool.New(ctx, o.Cfg.PGURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	c := &calibration{o: &o, pool: pool, local: serverIsLocal(ctx, pool), rep: &Report{SchemaVersion: SchemaVersion, StartedAt: time.Now().UTC(), Env: runner.HostEnv(nil), Workload: o.Spec,
		Events: map[string]int{}, PGBench: map[string][]string{}, Scripts: map[string]string{}}}
	for _, st := range o.Strategies {
		if err := c.size(ctx, st); err != nil {
			return c.rep, err
		}
	}
	for r := 1; r <= o.Rounds; r++ {
		for _, st := range o.Strategies {
			for _, cmp := range o.Compare {
				if err := c.measure(ctx, r, cmp, st); err != nil {
					return c.rep, err
				}
			}
		}
	}
	c.rep.Summaries = summarize(c.rep.Samples)
	return c.rep, nil
}

// size runs a short pilot cell and sizes the strategy's none cells to
// last about the warm-up plus Measure.
func (c *calibration) size(ctx context.Context, st string) error {
	pilot := c.o.Spec.Consumers * 400
	if batched(st) {
		pilot = c.o.Spec.Consumers * c.o.Spec.BatchSize * 40
	}
	cell, _, err := c.none(ctx, c.emptyInbox(), st, max(pilot, c.o.Spec.Aggregates), inbox.AuditOff)
	if err != nil {
		return fmt.Errorf("pilot cell: %w", err)
	}
	window := c.o.Spec.Warmup.D() + c.o.Measure
	n := int(cell.Throughput.EventsPerS * window.Seconds())
	c.rep.Events[st] = min(max(n, c.o.Spec.Aggregates), 20_000_000)
	fmt.Fprintf(c.o.Progress, "%-6s pilot: %s events/s: none cells get %d events (~%s)\n", st,
		results.FormatRate(cell.Throughput.EventsPerS), c.rep.Events[st], window)
	return nil
}

// measure takes one sample of a comparison.
func (c *calibration) measure(ctx context.Context, round int, cmp, st string) error {
	s := Sample{Round: round, Compare: cmp, Strategy: st}
	var err error
	switch cmp {
	case ComparePGBench, ComparePGX:
		return c.versusTwins(ctx, round, cmp, st)
	case CompareAudit:
		err = c.auditAB(ctx, round, st, &s)
	case ComparePrefill, ComparePrune:
		return c.inboxSize(ctx, round, cmp, st)
	}
	if err != nil {
		return fmt.Errorf("round %d, %s, %s: %w", round, cmp, st, err)
	}
	c.record(s)
	return nil
}

// record completes a sample's ratios, keeps it and prints it.
func (c *calibration) record(s Sample) {
	cmp, round, st := s.Compare, s.Round, s.Strategy
	s.Ratio = s.Subject / s.Reference
	if s.SubjectCPU != nil && s.ReferenceCPU != nil && s.SubjectCPU.Total > 0 {
		s.CPURatio = s.ReferenceCPU.Total / s.SubjectCPU.Total
	}
	c.rep.Samples = append(c.rep.Samples, s)
	ref := map[string]string{ComparePGBench: "pgbench", ComparePGX: "pgx loop", CompareAudit: "no audit", ComparePrefill: "empty", ComparePrune: "no prune"}[cmp]
	sub := map[string]string{ComparePGBench: "none", ComparePGX: "none", CompareAudit: "audit", ComparePrefill: "prefilled", ComparePrune: "prune"}[cmp]
	fmt.Fprintf(c.o.Progress, "round %d  %-6s %-8s %s %s events/s, %s %s events/s: ratio %.3f (audit %s, host CPU %.0f%%)\n",
		round, st, cmp, sub, results.FormatRate(s.Subject), ref, results.FormatRate(s.Reference), s.Ratio, s.Audit, 100*s.HostCPUBusy)
	if s.SubjectP99 > 0 && s.ReferenceP99 > 0 {
		fmt.Fprintf(c.o.Progress, "         p99: e2e %s vs %s, apply %s vs %s\n", results.FormatMicros(s.SubjectP99), results.FormatMicros(s.ReferenceP99),
			results.FormatMicros(s.SubjectApplyP99), results.FormatMicros(s.ReferenceApplyP99))
	}
	if s.CPURatio > 0 {
		fmt.Fprintf(c.o.Progress, "         CPU per event: %s %s, %s %s: ratio %.3f\n", sub, s.SubjectCPU, ref, s.ReferenceCPU, s.CPURatio)
	}
}

// emptyInbox is the workload without its prefill and retention: what
// the pgbench and audit comparisons, and the reference of prefill, run.
func (c *calibration) emptyInbox() workload.Spec {
	s := c.prefilled()
	s.InboxPrefill, s.InboxPrefillAge = 0, 0
	return s
}

// prefilled is the workload with its prefill and without retention.
func (c *calibration) prefilled() workload.Spec {
	s := *c.o.Spec
	s.InboxPruneEvery, s.InboxPruneKeep = 0, 0
	return s
}

// inboxSize measures the prefill and prune comparisons. When both are
// asked for, one round measures three cells (empty, prefilled, prefilled
// with retention: the prefilled one is the reference of prune), in an
// order that reverses from round to round; it runs when prefill's turn
// comes and prune's turn is then skipped.
func (c *calibration) inboxSize(ctx context.Context, round int, cmp, st string) error {
	both := slices.Contains(c.o.Compare, ComparePrefill) && slices.Contains(c.o.Compare, ComparePrune)
	if both && cmp == ComparePrune {
		return nil
	}
	kinds := []string{"empty", "prefilled"}
	switch {
	case both:
		kinds = append(kinds, "pruned")
	case cmp == ComparePrune:
		kinds = []string{"prefilled", "pruned"}
	}
	if round%2 == 0 {
		slices.Reverse(kinds)
	}
	specs := map[string]workload.Spec{"empty": c.emptyInbox(), "prefilled": c.prefilled(), "pruned": *c.o.Spec}
	cells, cpus := map[string]results.Cell{}, map[string]*CPU{}
	for _, k := range kinds {
		cell, cpu, err := c.none(ctx, specs[k], st, c.rep.Events[st], inbox.AuditStatement)
		if err != nil {
			return fmt.Errorf("round %d, %s cell, %s: %w", round, k, st, err)
		}
		cells[k], cpus[k] = cell, cpu
	}
	pair := func(cmp, sub, ref string) {
		a, b := cells[sub], cells[ref]
		c.record(Sample{Round: round, Compare: cmp, Strategy: st, Subject: a.Throughput.EventsPerS, Reference: b.Throughput.EventsPerS,
			Audit: a.Audit, HostCPUBusy: (a.Throughput.HostCPUBusy + b.Throughput.HostCPUBusy) / 2,
			SubjectP99: a.Latency.E2E.P99, ReferenceP99: b.Latency.E2E.P99, SubjectApplyP99: a.Latency.Apply.P99, ReferenceApplyP99: b.Latency.Apply.P99,
			SubjectCPU: cpus[sub], ReferenceCPU: cpus[ref]})
	}
	if slices.Contains(c.o.Compare, ComparePrefill) {
		pair(ComparePrefill, "prefilled", "empty")
	}
	if slices.Contains(c.o.Compare, ComparePrune) {
		pair(ComparePrune, "pruned", "prefilled")
	}
	return nil
}

// versusTwins measures the pgbench and pgx comparisons: the twin's
// references asked for (pgbench, the pgx loop), then one none cell, with
// the same audit; each reference gets its sample against that cell. When
// both are asked for they run at pgbench's turn and pgx's is skipped.
func (c *calibration) versusTwins(ctx context.Context, round int, cmp, st string) error {
	both := slices.Contains(c.o.Compare, ComparePGBench) && slices.Contains(c.o.Compare, ComparePGX)
	if both && cmp == ComparePGX {
		return nil
	}
	refs := []string{cmp}
	if both {
		refs = []string{ComparePGBench, ComparePGX}
	}
	mode := inbox.AuditOff
	if c.o.Audit != inbox.AuditOff && c.o.Audit != "" {
		mode = inbox.ResolveAudit(ctx, c.pool, c.o.Audit)
	}
	type side struct {
		eps float64
		cpu *CPU
	}
	got := map[string]side{}
	for _, ref := range refs {
		eps, cpu, err := c.twin(ctx, ref, st, mode)
		if err != nil {
			return fmt.Errorf("round %d, %s, %s: %w", round, ref, st, err)
		}
		got[ref] = side{eps, cpu}
	}
	cell, cpu, err := c.none(ctx, c.emptyInbox(), st, c.rep.Events[st], mode)
	if err != nil {
		return fmt.Errorf("round %d, %s, %s: %w", round, cmp, st, err)
	}
	for _, ref := range refs {
		c.record(Sample{Round: round, Compare: ref, Strategy: st, Subject: cell.Throughput.EventsPerS, Reference: got[ref].eps,
			Audit: cell.Audit, HostCPUBusy: cell.Throughput.HostCPUBusy, SubjectP99: cell.Latency.E2E.P99, SubjectApplyP99: cell.Latency.Apply.P99,
			SubjectCPU: cpu, ReferenceCPU: got[ref].cpu})
	}
	return nil
}

// twin runs one reference of the twin comparisons (pgbench or the pgx
// loop) on a freshly prepared twin schema with the audit mode, checks
// what it did (Verify), and returns its events/s and CPU per event.
func (c *calibration) twin(ctx context.Context, ref, st string, mode inbox.AuditMode) (float64, *CPU, error) {
	sh := c.o.shape(st)
	if err := Prepare(ctx, c.pool, sh); err != nil {
		return 0, nil, err
	}
	defer inbox.DropSchema(context.WithoutCancel(ctx), c.pool, sh.Schema)
	var wal *inbox.WALAudit
	var err error
	switch mode {
	case inbox.AuditOff:
	case inbox.AuditWAL:
		if wal, err = inbox.StartWALAudit(ctx, c.o.Cfg.PGURL, sh.Schema); err != nil {
			return 0, nil, err
		}
		defer wal.Close(ctx)
	default:
		if err := inbox.InstallAudit(ctx, c.pool, sh.Schema, mode); err != nil {
			return 0, nil, err
		}
	}
	var local *pgxpool.Pool
	if c.local {
		local = c.pool
	}
	// As every bench run cell does (runner/cell.go), so that no side pays
	// for a checkpoint another made due.
	if _, err := inbox.Checkpoint(ctx, c.pool); err != nil {
		return 0, nil, err
	}
	var eps float64
	var cpu *CPU
	if ref == ComparePGX {
		run, err := RunLoop(ctx, c.o.Cfg.PGURL, sh, c.o.Spec.Warmup.D(), c.o.Measure, local)
		if err != nil {
			return 0, nil, err
		}
		eps, cpu = run.EventsPerS, run.CPU
	} else {
		run, err := RunPGBench(ctx, c.o.PGBench, c.o.Cfg.PGURL, sh, c.o.Spec.Warmup.D(), c.o.Measure, local)
		c.rep.PGBench[st] = run.Command
		if script, serr := Script(sh); serr == nil {
			c.rep.Scripts[st] = script
		}
		if err != nil {
			return 0, nil, err
		}
		if run.Failed > 0 {
			return 0, nil, fmt.Errorf("pgbench: %d transactions of the twin failed", run.Failed)
		}
		eps, cpu = run.EventsPerS, run.CPU
	}
	if _, err := Verify(ctx, c.pool, sh); err != nil {
		return 0, nil, err
	}
	if wal != nil {
		if err := wal.Finish(ctx); err != nil {
			return 0, nil, err
		}
	}
	return eps, cpu, nil
}

// auditAB runs the none cell with the audit and without, the order
// alternating from round to round so a drift of the machine favours
// neither side.
func (c *calibration) auditAB(ctx context.Context, round int, st string, s *Sample) error {
	on := inbox.ResolveAudit(ctx, c.pool, c.o.ABMode)
	if on == inbox.AuditOff {
		on = inbox.AuditStatement
	}
	modes := []inbox.AuditMode{on, inbox.AuditOff}
	if round%2 == 0 {
		modes = []inbox.AuditMode{inbox.AuditOff, on}
	}
	for _, m := range modes {
		cell, cpu, err := c.none(ctx, c.emptyInbox(), st, c.rep.Events[st], m)
		if err != nil {
			return err
		}
		if m == inbox.AuditOff {
			s.Reference, s.ReferenceCPU = cell.Throughput.EventsPerS, cpu
			s.ReferenceP99, s.ReferenceApplyP99 = cell.Latency.E2E.P99, cell.Latency.Apply.P99
		} else {
			s.Subject, s.Audit, s.SubjectCPU = cell.Throughput.EventsPerS, cell.Audit, cpu
			s.SubjectP99, s.SubjectApplyP99 = cell.Latency.E2E.P99, cell.Latency.Apply.P99
		}
		s.HostCPUBusy += cell.Throughput.HostCPUBusy / 2
	}
	return nil
}

// none runs one `bench run --brokers none` cell of the strategy, with its
// CPU per event when the server is local, and drops its schema. A cell
// that did not pass is an error: its figures would not be the strategy's.
func (c *calibration) none(ctx context.Context, spec workload.Spec, st string, events int, mode inbox.AuditMode) (results.Cell, *CPU, error) {
	spec.Events, spec.Strategy = events, st
	c.seq++
	id := fmt.Sprintf("calibrate-%s-%d", time.Now().UTC().Format("150405"), c.seq)
	progress := io.Discard
	if spec.InboxPrefill > 0 {
		progress = c.o.Progress // minutes of loading deserve a word
	}
	var stop func(time.Duration) (CPU, error)
	if c.local {
		sm := &sampler{pool: c.pool, client: selfCPU, side: c.cellSide(id)}
		stop = sm.start(ctx)
	}
	run, _, err := runner.Run(ctx, runner.Options{Cfg: c.o.Cfg, Spec: &spec, Brokers: []string{"none"}, Strategies: []string{st},
		RunID: id, NoWrite: true, Measure: true, Audit: mode != inbox.AuditOff, AuditMode: mode, StallTimeout: 30 * time.Second,
		InboxLayout: c.o.InboxLayout, Progress: progress})
	var cpu *CPU
	if stop != nil {
		if cw, cerr := stop(spec.Warmup.D()); cerr == nil {
			cpu = &cw
		}
	}
	if run != nil {
		for _, cell := range run.Cells {
			if derr := inbox.DropSchema(context.WithoutCancel(ctx), c.pool, cell.Schema); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}
	if err != nil {
		return results.Cell{}, nil, err
	}
	cell := run.Cells[0]
	if cell.Invariants.Verdict != results.VerdictPass || cell.Error != "" {
		return cell, nil, fmt.Errorf("none/%s cell did not pass (verdict %s %s): its throughput would not be the strategy's", st, cell.Invariants.Verdict, cell.Error)
	}
	return cell, cpu, nil
}

// cellSide finds the schema of run id's one cell once it exists; its
// connections are named by runner.AppName.
func (c *calibration) cellSide(id string) func(context.Context) (string, string, error) {
	var schema string
	return func(ctx context.Context) (string, string, error) {
		if schema == "" {
			prefix := strings.ToLower("ib_" + strings.ReplaceAll(id, "-", "_") + "_")
			err := c.pool.QueryRow(ctx, "SELECT coalesce(min(nspname), '') FROM pg_namespace WHERE left(nspname, length($1)) = $1", prefix).Scan(&schema)
			if err != nil {
				return "", "", err
			}
			if schema != "" {
				var ok bool
				if err := c.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".account").Scan(&ok); err != nil || !ok {
					schema = ""
					return "", "", err
				}
			}
		}
		return schema, runner.AppName(schema), nil
	}
}

// summarize takes each comparison's median and range over the rounds.
func summarize(samples []Sample) []Summary {
	type key struct{ cmp, st string }
	var order []key
	ratios, cpuRatios := map[key][]float64{}, map[key][]float64{}
	for _, s := range samples {
		k := key{s.Compare, s.Strategy}
		if _, ok := ratios[k]; !ok {
			order = append(order, k)
		}
		ratios[k] = append(ratios[k], s.Ratio)
		if s.CPURatio > 0 {
			cpuRatios[k] = append(cpuRatios[k], s.CPURatio)
		}
	}
	var out []Summary
	for _, k := range order {
		r := ratios[k]
		med, lo, hi := medianRange(r)
		sum := Summary{Compare: k.cmp, Strategy: k.st, Median: med, Min: lo, Max: hi, Rounds: len(r),
			Goal: Goals[k.cmp], Met: Goals[k.cmp] == 0 || med >= Goals[k.cmp]}
		if cr := cpuRatios[k]; len(cr) > 0 {
			sum.CPUMedian, sum.CPUMin, sum.CPUMax = medianRange(cr)
		}
		out = append(out, sum)
	}
	return out
}

// medianRange sorts r and returns its median, minimum and maximum.
func medianRange(r []float64) (med, lo, hi float64) {
	sort.Float64s(r)
	med = r[len(r)/2]
	if len(r)%2 == 0 {
		med = (r[len(r)/2-1] + r[len(r)/2]) / 2
	}
	return med, r[0], r[len(r)-1]
}

// String is "server 21.3 + client 4.2 = 25.5 µs/event".
func (c *CPU) String() string {
	return fmt.Sprintf("server %.1f + client %.1f = %.1f µs/event", c.Server, c.Client, c.Total)
}

// WriteSummary prints the summaries as a table.
func (r *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%-8s %-8s %-22s %-8s %s\n", "COMPARE", "STRATEGY", "RATIO median [min–max]", "GOAL", "")
	for _, s := range r.Summaries {
		what := map[string]string{ComparePGBench: "none / pgbench", ComparePGX: "none / bare pgx loop", CompareAudit: "audit / no audit",
			ComparePrefill: "prefilled / empty inbox", ComparePrune: "retention beside / none"}[s.Compare]
		verdict, goal := "met", fmt.Sprintf("≥ %.2f", s.Goal)
		switch {
		case s.Goal == 0:
			verdict, goal = "measured", "-"
		case !s.Met:
			verdict = "NOT met"
		}
		cpu := ""
		if s.CPUMedian > 0 {
			cpu = fmt.Sprintf("; CPU per event %.3f [%.3f–%.3f]", s.CPUMedian, s.CPUMin, s.CPUMax)
		}
		fmt.Fprintf(w, "%-8s %-8s %.3f [%.3f–%.3f]    %-7s  %s (%s, %d rounds%s)\n", s.Compare, s.Strategy, s.Median, s.Min, s.Max,
			goal, verdict, what, s.Rounds, cpu)
	}
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error { return results.WriteJSON(path, r) }

// Met reports whether every comparison reached its goal.
func (r *Report) Met() bool {
	for _, s := range r.Summaries {
		if !s.Met {
			return false
		}
	}
	return len(r.Summaries) > 0
}

// String names the comparisons for messages.
func (r *Report) String() string {
	var parts []string
	for _, s := range r.Summaries {
		parts = append(parts, fmt.Sprintf("%s/%s %.3f", s.Compare, s.Strategy, s.Median))
	}
	return strings.Join(parts, ", ")
}
