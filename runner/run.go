// Package runner runs a workload through brokers into the inbox, one cell
// per broker × strategy, measures it, and checks the exactly-once-effect
// invariants against the workload's oracle.
//
// Run walks the cells one after another. A cell (cell.go) wires five
// parts, each in its own file with its own small state: the publisher
// (plan → broker, open loop, send-side faults), the consumers (goroutines
// of this process, or `bench worker` processes joining the run through
// PostgreSQL — chosen once per cell behind one interface), the handler
// (deliveries → inbox → verdicts, outcome counting), the mid-stream
// actions (planned restarts, broker restarts, killed connections) and the
// waiter (done, stall, progress). What they count meets in a tally. After
// the stream, the inbox package reads a snapshot of the cell's tables and
// Judge, a pure function, names every anomaly (judge.go).
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// NewRunID returns a sortable, readable run id.
func NewRunID() string { return time.Now().UTC().Format("20060102-150405") }

// Run executes every cell and writes result.json; the returned run is what
// was written.
func Run(ctx context.Context, o Options) (*results.Run, string, error) {
	if err := o.Validate(); err != nil {
		return nil, "", err
	}
	if err := checkExtras(ctx, o); err != nil {
		return nil, "", err
	}
	if err := claim(ctx, &o); err != nil {
		return nil, "", err
	}
	stopExternal, err := startExternal(ctx, &o)
	if err != nil {
		return nil, "", err
	}
	defer stopExternal()
	var fl *fleet
	if o.Workers.any() {
		spec := *o.Spec
		spec.Consumers = o.Workers.Local + o.Workers.Remote
		o.Spec = &spec
		f, err := startFleet(ctx, o)
		if err != nil {
			return nil, "", err
		}
		defer f.finish()
		fl = f
	}
	wl, err := json.Marshal(o.Spec)
	if err != nil {
		return nil, "", err
	}
	run := &results.Run{SchemaVersion: results.SchemaVersion, RunID: o.RunID, StartedAt: time.Now().UTC(),
		Workload: wl, Env: environment(o)}
	plan := o.Stream.Plan
	if plan == nil {
		plan = workload.Generate(o.Spec)
	}
	names := cellStrategies(o)
	run.Rounds, run.WarmupRounds = o.Rounds, o.WarmupRounds
	fmt.Fprintf(o.Console.Progress, "run %s: workload %s, %d events over %d aggregates (%d sends with faults), %d cells%s\n",
		o.RunID, o.Spec.Name, len(plan.Events), o.Spec.Aggregates, len(plan.Publishes), len(o.Brokers)*len(names), roundsText(o))
	var cells []cellKey
	for _, b := range o.Brokers {
		for _, s := range names {
			cells = append(cells, cellKey{b, s})
		}
	}
	byCell := map[cellKey][]results.Cell{}
	var passed []results.Cell
	// Warm-up rounds are numbered 1-W … 0 and run first; round 1 then
	// keeps the given order.
	for r := 1 - o.WarmupRounds; r <= o.Rounds && ctx.Err() == nil; r++ {
		var round []results.Cell
		for i, k := range roundOrder(cells, r) {
			if ctx.Err() != nil {
				break
			}
			ask := run.Env.Durability == nil || run.Env.Durability.Settings[k.broker] == nil
			c, durability := runCell(ctx, &o, plan, k.broker, k.strategy, r, fl, ask)
			if o.Rounds > 1 || o.WarmupRounds > 0 {
				c.Round, c.Order = max(r, 0), i+1
			}
			if ask {
				run.Env.AddDurability(k.broker, durability)
			}
			fmt.Fprintf(o.Console.Progress, "%s%-15s %-26s %s  %s events/s  e2e p99 %s%s  %s\n", roundLabel(o, r), k.broker, k.strategy, c.Invariants.Verdict,
				results.FormatRate(c.Throughput.EventsPerS), fmtMicros(c.Latency.E2E.P99), steadyText(c.Window), strings.TrimSpace(results.AnomalyLine(c)))
			pass := c.Invariants.Verdict == results.VerdictPass
			if pass {
				passed = append(passed, c)
			}
			if r <= 0 {
				if pass {
					continue // warmed up; nothing of it is kept
				}
				c.Notes = append(c.Notes, fmt.Sprintf("a warm-up round's cell (round 0, not measured) ended %s and is kept among the rounds so that its verdict counts", c.Invariants.Verdict))
			}
			round = append(round, c)
		}
		vsBaseline(round)
		for _, c := range round {
			k := cellKey{c.Broker, c.Strategy}
			byCell[k] = append(byCell[k], c)
		}
	}
	for _, k := range cells {
		if rs := byCell[k]; len(rs) > 0 {
			run.Cells = append(run.Cells, results.Aggregate(rs))
		}
	}
	noteAboveBaseline(run.Cells)
	run.FinishedAt = time.Now().UTC()
	citeCalibration(run, o.Output.Dir)
	dir := ""
	if !o.Output.NoWrite {
		dir = filepath.Join(o.Output.Dir, o.RunID)
		if _, err := run.Write(dir); err != nil {
			return run, dir, fmt.Errorf("write result: %w", err)
		}
	}
	if ctx.Err() != nil {
		return run, dir, ctx.Err()
	}
	if n, err := forgetPassed(ctx, &o, passed); err != nil {
		// The result stands; what is left costs disk, not figures.
		fmt.Fprintf(o.Console.Progress, "run %s: could not drop the passed cells' schemas and topics (they stay until a run with --run-id %s --replace): %v\n", o.RunID, o.RunID, err)
	} else if n > 0 {
		fmt.Fprintf(o.Console.Progress, "run %s: dropped the schemas and topics of the %d passed cell round(s); the others keep theirs (--keep-data keeps all)\n", o.RunID, n)
	}
	return run, dir, nil
}

// noteAboveBaseline explains, on a rate-search cell whose maximum
// sustainable rate came out above the database-only baseline's of the same
// strategy, why: the baseline bounds what any broker can add to it, so
// such a figure is noise within the searches' precision, or the baseline's
// search stopped for a reason of its own.
func noteAboveBaseline(cells []results.Cell) {
	base := map[string]*results.Cell{}
	for i := range cells {
		if c := &cells[i]; c.Baseline && c.Rate != nil {
			base[c.Strategy] = c
		}
	}
	for i := range cells {
		c := &cells[i]
		b := base[c.Strategy]
		if c.Baseline || c.Rate == nil || b == nil || c.Rate.MSR <= b.Rate.MSR || b.Rate.MSR == 0 {
			continue
		}
		p := c.Rate.Criteria.Precision
		why := fmt.Sprintf("within the two searches' precision (each bracket is ±%.0f%%): the broker adds nothing to the database's capacity, so read both as the same", 100*p)
		if c.Rate.MSR > b.Rate.MSR*(1+p)*(1+p) {
			why = fmt.Sprintf("beyond the searches' precision: the baseline's search was limited by %s", b.Rate.LimitedBy)
			if b.Rate.Uncertain != "" {
				why += " (" + b.Rate.Uncertain + ")"
			}
			why += "; the broker cannot add capacity to the database, so the baseline's figure is the one to doubt"
		}
		c.Notes = append(c.Notes, fmt.Sprintf("maximum sustainable rate %s/s above the baseline's %s/s: %s",
			results.FormatRate(c.Rate.MSR), results.FormatRate(b.Rate.MSR), why))
	}
}

// cellKey is one broker × strategy.
type cellKey struct{ broker, strategy string }

// roundOrder is the order of the cells in round r (1-based): as given on
// odd rounds, reversed on even ones, so a cell early in one round is late
// in the next (warm-up rounds, 1-W … 0, alike).
func roundOrder(cells []cellKey, r int) []cellKey {
	if r%2 != 0 {
		return cells
	}
	out := make([]cellKey, len(cells))
	for i, c := range cells {
		out[len(cells)-1-i] = c
	}
	return out
}

// vsBaseline sets each cell's ratio to the baseline cell of its strategy
// in the same round.
func vsBaseline(round []results.Cell) {
	base := map[string]float64{}
	for _, c := range round {
		if c.Baseline && c.Throughput.EventsPerS > 0 {
			base[c.Strategy] = c.Throughput.EventsPerS
		}
	}
	for i := range round {
		c := &round[i]
		if b := base[c.Strategy]; b > 0 && !c.Baseline {
			c.Throughput.VsBaseline = c.Throughput.EventsPerS / b
		}
	}
}

func roundsText(o Options) string {
	if o.Rounds <= 1 && o.WarmupRounds == 0 {
		return ""
	}
	text := fmt.Sprintf(", %d rounds", o.Rounds)
	if o.Rounds == 1 {
		text = ", 1 round"
	}
	if o.WarmupRounds > 0 {
		text += fmt.Sprintf(" after %d of warm-up", o.WarmupRounds)
	}
	return text
}

func roundLabel(o Options, r int) string {
	if r <= 0 {
		return fmt.Sprintf("warm-up %d/%d  ", r+o.WarmupRounds, o.WarmupRounds)
	}
	if o.Rounds <= 1 {
		return ""
	}
	return fmt.Sprintf("round %d/%d  ", r, o.Rounds)
}

// steadyText marks a steady cell's figure that is not steady.
func steadyText(w *results.Window) string {
	if w == nil || w.Steady {
		return ""
	}
	return "  NOT STEADY: " + w.Why
}

// claim connects to check the run id is new (or to replace its
// leftovers).
func claim(ctx context.Context, o *Options) error {
	conn, err := pgx.Connect(ctx, o.Cfg.PGURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return claimRunID(ctx, o, conn)
}

// environment records where the figures come from.
func environment(o Options) results.Env {
	e := HostEnv(o.Output.Servers)
	e.Notes = append(e.Notes, o.Output.ServerNotes...)
	e.Measure, e.CommandArg = o.Measure.Latency, config.RedactArgs(o.Output.Args)
	if o.Output.Durability != nil {
		d := *o.Output.Durability
		d.Settings = map[string]map[string]string{}
		for k, v := range o.Output.Durability.Settings {
			d.Settings[k] = v
		}
		e.Durability = &d
	}
	return e
}

// citeCalibration notes, on cells whose pace the broker's publish path
// set, what the latest client calibration measured of that broker: its
// vendor's tool against this driver on the same shape. A slow publish
// path is then the broker's, or the client's, by measurement.
func citeCalibration(run *results.Run, root string) {
	cal, dir := results.LatestCalibration(root)
	if cal == nil {
		return
	}
	for i := range run.Cells {
		c := &run.Cells[i]
		if c.Throughput.Bound != results.BoundPublish || c.Baseline {
			continue
		}
		b := cal.Broker(c.Broker)
		if b == nil || b.Error != "" {
			continue
		}
		c.Notes = append(c.Notes, fmt.Sprintf("bound by the broker's publish path: the client calibration of %s (%s) measured %s's own tool (%s) publishing %s msgs/s and this driver %s (%.2f of it) on %d-byte messages",
			cal.StartedAt.UTC().Format("2006-01-02 15:04"), dir, c.Broker, b.Vendor.Tool, results.FormatRate(b.Vendor.Publish.MsgsPerS),
			results.FormatRate(b.Driver.Publish.MsgsPerS), b.PublishRatio, cal.Shape.MessageSize))
	}
}
