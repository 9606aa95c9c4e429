package dbcalib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/brokers/none" // the baseline driver every calibration cell runs on

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

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
	spec := c.emptyInbox()
	spec.Strategy, spec.Events = st, max(pilot, c.o.Spec.Aggregates)
	cell, _, err := c.none(ctx, spec, inbox.AuditOff)
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
	sub := map[string]string{ComparePGBench: none.Name, ComparePGX: none.Name, CompareAudit: "audit", ComparePrefill: "prefilled", ComparePrune: "prune"}[cmp]
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
		cell, cpu, err := c.none(ctx, c.sized(specs[k], st), inbox.AuditStatement)
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
			SubjectCPU: cpus[sub], ReferenceCPU: cpus[ref], SubjectFirst: slices.Index(kinds, sub) < slices.Index(kinds, ref)})
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
// references asked for (pgbench, the pgx loop) and one none cell, with
// the same audit; each reference gets its sample against that cell. When
// both are asked for they run at pgbench's turn and pgx's is skipped.
// The order alternates from round to round and keeps each comparison's
// two sides next to each other: pgbench, none, pgx in odd rounds, pgx,
// none, pgbench in even ones (one reference: it, then none; then the
// reverse), so that neither side of a comparison always runs first and
// none does not always run last.
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
	var cell results.Cell
	var cellCPU *CPU
	for _, s := range twinOrder(round, refs) {
		if s == none.Name {
			var err error
			if cell, cellCPU, err = c.none(ctx, c.sized(c.emptyInbox(), st), mode); err != nil {
				return fmt.Errorf("round %d, %s, %s: %w", round, cmp, st, err)
			}
			continue
		}
		eps, cpu, err := c.twin(ctx, s, st, mode)
		if err != nil {
			return fmt.Errorf("round %d, %s, %s: %w", round, s, st, err)
		}
		got[s] = side{eps, cpu}
	}
	for _, ref := range refs {
		c.record(Sample{Round: round, Compare: ref, Strategy: st, Subject: cell.Throughput.EventsPerS, Reference: got[ref].eps,
			Audit: cell.Audit, HostCPUBusy: cell.Throughput.HostCPUBusy, SubjectP99: cell.Latency.E2E.P99, SubjectApplyP99: cell.Latency.Apply.P99,
			SubjectCPU: cellCPU, ReferenceCPU: got[ref].cpu, SubjectFirst: noneFirst(round, refs, ref)})
	}
	return nil
}

// twinOrder is the order of a twin round's sides: the references with
// the none cell (none.Name) after the first of them, reversed in even
// rounds.
func twinOrder(round int, refs []string) []string {
	order := append([]string{refs[0], none.Name}, refs[1:]...)
	if round%2 == 0 {
		slices.Reverse(order)
	}
	return order
}

// noneFirst says whether the none cell ran before ref in the round.
func noneFirst(round int, refs []string, ref string) bool {
	order := twinOrder(round, refs)
	return slices.Index(order, none.Name) < slices.Index(order, ref)
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
	at := Target{PGURL: c.o.Cfg.PGURL, Warmup: c.o.Spec.Warmup.D(), Measure: c.o.Measure}
	if c.local {
		at.Local = c.pool
	}
	// As every bench run cell does (runner/stream.go), so that no side pays
	// for a checkpoint another made due.
	if _, err := inbox.Checkpoint(ctx, c.pool); err != nil {
		return 0, nil, err
	}
	var eps float64
	var cpu *CPU
	if ref == ComparePGX {
		run, err := RunLoop(ctx, sh, at)
		if err != nil {
			return 0, nil, err
		}
		eps, cpu = run.EventsPerS, run.CPU
	} else {
		run, err := RunPGBench(ctx, c.o.PGBench, sh, at)
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
	s.SubjectFirst = true
	if round%2 == 0 {
		modes = []inbox.AuditMode{inbox.AuditOff, on}
		s.SubjectFirst = false
	}
	for _, m := range modes {
		cell, cpu, err := c.none(ctx, c.sized(c.emptyInbox(), st), m)
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

// sized is spec running strategy st over the events its none cells were
// sized to (size).
func (c *calibration) sized(spec workload.Spec, st string) workload.Spec {
	spec.Strategy, spec.Events = st, c.rep.Events[st]
	return spec
}

// none runs one `bench run --brokers none` cell of spec's strategy and
// events, with its CPU per event when the server is local, and drops its
// schema. A cell that did not pass is an error: its figures would not be
// the strategy's.
func (c *calibration) none(ctx context.Context, spec workload.Spec, mode inbox.AuditMode) (results.Cell, *CPU, error) {
	st := spec.Strategy
	// The none side runs the events its pgbench twin ran, once: a
	// workload's steady-state window and rounds are for bench run.
	spec.Measure, spec.WarmupMax, spec.Rounds, spec.MaxBacklog = 0, 0, 0, 0
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
	run, _, err := runner.Run(ctx, runner.Options{Cfg: c.o.Cfg, Spec: &spec, Brokers: []string{none.Name}, Strategies: []string{st},
		RunID: id, Output: runner.Output{NoWrite: true}, Measure: runner.Measure{Latency: true, Audit: mode != inbox.AuditOff, AuditMode: mode},
		Limits: runner.Limits{Stall: 30 * time.Second}, Inbox: c.o.InboxLayout, Console: runner.Console{Progress: progress}})
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
