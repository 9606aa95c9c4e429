package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/service"
	"github.com/inboxbench/inboxbench/workload"
)

// rounds runs a run's cells round after round and gathers what each round
// of each cell found. Its decisions each have one place: the order of the
// cells within a round (order.go: every cell in every place equally
// often), which rounds run (all: the warm-up rounds while cells still get
// faster, warmup.go, then the measured ones), and what of a round is kept
// (kept); results aggregates a cell's kept rounds into its figures.
type rounds struct {
	o     *Options
	plan  *workload.Plan
	fleet *fleet
	// env is the run's environment: the first cell of each broker asks
	// its driver what its confirms mean, for env's durability.
	env   *results.Env
	cells []cellKey // the run's cells in their given order
	// byCell are each cell's kept rounds, in the order they ran; passed
	// every cell round that passed, warm-up ones too (their schemas and
	// topics go once the result is written).
	byCell map[cellKey][]results.Cell
	passed []results.Cell
	warmup *warmup // nil without warm-up rounds
}

// roundNo is a round of the run: a warm-up round (warm, n = 1, 2 …) or a
// measured one (n = 1 … Rounds).
type roundNo struct {
	n    int
	warm bool
}

// cellKey is one broker × strategy.
type cellKey struct{ broker, strategy string }

// newRounds prepares the rounds of every broker × strategy of o, whose
// plan is o's scenario's or the workload's.
func newRounds(o *Options, fl *fleet, env *results.Env) *rounds {
	rs := &rounds{o: o, plan: o.Stream.Plan, fleet: fl, env: env, byCell: map[cellKey][]results.Cell{}}
	if rs.plan == nil {
		rs.plan = workload.Generate(o.Spec)
	}
	for _, b := range o.Brokers {
		for _, s := range cellStrategies(*o) {
			rs.cells = append(rs.cells, cellKey{b, s})
		}
		if sp := o.Service; sp != nil && serviceRuns(sp, b) {
			rs.cells = append(rs.cells, cellKey{b, sp.Label()})
		}
	}
	if rs.warmup = newWarmup(o, rs.cells); rs.warmup != nil {
		rs.warmup.ended = func(w *results.Warmup) { fmt.Fprintf(o.Console.Progress, "warm-up done: %s\n", w.Text()) }
	}
	return rs
}

// serviceRuns reports whether the service consumes from broker: the
// brokers its spec names, and none whose queues live inside bench (the
// baseline, kafka-embedded).
func serviceRuns(sp *service.Spec, broker string) bool {
	ok, _ := sp.Speaks(broker)
	return ok && brokers.InfoOf(broker).Service != ""
}

// announce prints what the run is about to do.
func (rs *rounds) announce() {
	o := rs.o
	text := roundsText(*o)
	if rs.warmup != nil {
		text += rs.warmup.text()
	}
	fmt.Fprintf(o.Console.Progress, "run %s: workload %s, %d events over %d aggregates (%d sends with faults), %d cells%s\n",
		o.RunID, o.Spec.Name, len(rs.plan.Events), o.Spec.Aggregates, len(rs.plan.Publishes), len(rs.cells), text)
}

// all runs the warm-up rounds first, then the measured ones, until ctx
// ends.
func (rs *rounds) all(ctx context.Context) {
	if rs.warmup != nil {
		rs.warmup.start = time.Now()
		for w := 1; ctx.Err() == nil && !rs.warmup.done(); w++ {
			rs.round(ctx, roundNo{n: w, warm: true})
		}
	}
	for r := 1; r <= rs.o.Rounds && ctx.Err() == nil; r++ {
		rs.round(ctx, roundNo{n: r})
	}
}

// round runs the cells of round rn in the round's order — in a warm-up
// round those still warming up — and keeps what the round keeps, each
// cell's throughput set against the baseline's of its round.
func (rs *rounds) round(ctx context.Context, rn roundNo) {
	var kept []results.Cell
	i := 0
	for _, k := range roundOrder(rs.cells, rn.n) {
		if ctx.Err() != nil {
			break
		}
		if rn.warm && !rs.warmup.runs(k) {
			continue
		}
		began := time.Now()
		c := rs.runCell(ctx, k, rn)
		if i++; rs.o.Rounds > 1 || rs.warmup != nil {
			c.Round, c.Order = rn.n, i
			if rn.warm {
				c.Round = 0
			}
		}
		rs.print(rn, c)
		if rn.warm {
			rs.warmup.record(k, c, time.Since(began))
		}
		if c.Invariants.Verdict == results.VerdictPass {
			rs.passed = append(rs.passed, c)
		}
		if rs.kept(rn, &c) {
			kept = append(kept, c)
		}
	}
	vsBaseline(kept)
	for _, c := range kept {
		k := cellKey{c.Broker, c.Strategy}
		rs.byCell[k] = append(rs.byCell[k], c)
	}
}

// runCell runs cell k in round rn; the first cell of a broker also asks
// its driver what its confirms mean (brokers.DurabilityReporter).
func (rs *rounds) runCell(ctx context.Context, k cellKey, rn roundNo) results.Cell {
	id := roundCellID(rs.o, k.broker, k.strategy, rn)
	ask := rs.env.Durability == nil || rs.env.Durability.Settings[k.broker] == nil
	c := &cell{o: rs.o, plan: rs.plan, fleet: rs.fleet, broker: k.broker, name: k.strategy, round: rn,
		id: id, consumer: "balance-" + id, askDurability: ask}
	if sp := rs.o.Service; sp != nil && k.strategy == sp.Label() {
		c.svc = &serviceRun{spec: sp, intents: service.NewIntents()}
	}
	res := c.run(ctx)
	if ask {
		rs.env.AddDurability(k.broker, c.durability)
	}
	return res
}

// kept says whether cell round c of round rn is kept among the cell's
// rounds: every measured one; of a warm-up round only one that did not
// pass, so that its verdict counts (its notes say so). Nothing else of a
// warm-up is kept.
func (rs *rounds) kept(rn roundNo, c *results.Cell) bool {
	if !rn.warm {
		return true
	}
	if c.Invariants.Verdict == results.VerdictPass {
		return false
	}
	c.Notes = append(c.Notes, fmt.Sprintf("a warm-up round's cell (round 0, not measured) ended %s and is kept among the rounds so that its verdict counts", c.Invariants.Verdict))
	return true
}

// results are the run's cells, each its kept rounds aggregated, in the
// given order; a cell with none kept is left out.
func (rs *rounds) results() []results.Cell {
	var out []results.Cell
	for _, k := range rs.cells {
		if kept := rs.byCell[k]; len(kept) > 0 {
			out = append(out, results.Aggregate(kept))
		}
	}
	return out
}

// print writes a cell round's line to the progress output.
func (rs *rounds) print(rn roundNo, c results.Cell) {
	fmt.Fprintf(rs.o.Console.Progress, "%s%-15s %-26s %s  %s events/s  e2e p99 %s%s  %s\n", rs.roundLabel(rn), c.Broker, c.Strategy, c.Invariants.Verdict,
		results.FormatRate(c.Throughput.EventsPerS), fmtMicros(c.Latency.E2E.P99), steadyText(c.Window), strings.TrimSpace(results.AnomalyLine(c)))
}

// vsBaseline sets each cell's ratio to the baseline cell of its strategy
// in the same round; a service cell's, which has no baseline of its own,
// to the round's first baseline cell (the run's first strategy on none):
// what the database alone applies with the suite's consumer.
func vsBaseline(round []results.Cell) {
	base := map[string]float64{}
	first := 0.0
	for _, c := range round {
		if c.Baseline && c.Throughput.EventsPerS > 0 {
			base[c.Strategy] = c.Throughput.EventsPerS
			if first == 0 {
				first = c.Throughput.EventsPerS
			}
		}
	}
	for i := range round {
		c := &round[i]
		b := base[c.Strategy]
		if c.Service != nil {
			b = first
		}
		if b > 0 && !c.Baseline {
			c.Throughput.VsBaseline = c.Throughput.EventsPerS / b
		}
	}
}

// roundsText says how many rounds the run measures.
func roundsText(o Options) string {
	switch {
	case o.Rounds <= 1 && o.WarmupRounds == 0:
		return ""
	case o.Rounds == 1:
		return ", 1 round"
	}
	return fmt.Sprintf(", %d rounds", o.Rounds)
}

// roundLabel starts a cell round's progress line.
func (rs *rounds) roundLabel(rn roundNo) string {
	switch {
	case rn.warm && rs.warmup.limit > 0:
		return fmt.Sprintf("warm-up %d  ", rn.n)
	case rn.warm:
		return fmt.Sprintf("warm-up %d/%d  ", rn.n, rs.warmup.min)
	case rs.o.Rounds <= 1:
		return ""
	}
	return fmt.Sprintf("round %d/%d  ", rn.n, rs.o.Rounds)
}

// steadyText marks a steady cell's figure that is not steady.
func steadyText(w *results.Window) string {
	if w == nil || w.Steady {
		return ""
	}
	return "  NOT STEADY: " + w.Why
}
