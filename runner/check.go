package runner

import (
	"context"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// A checker judges a cell once its writes are final: what the database
// (and the external service) holds against what was published. A cell
// chooses its checker once (cell.checker); the steps before and after it
// (the last drain of what is parked, the audit log's completion, the
// deliveries' own decisions) are the cell's, whichever it is.
type checker interface {
	// verdict judges the cell; plan is what was published.
	verdict(ctx context.Context, plan *workload.Plan) (verdict, error)
}

// verdict is what judging a cell found.
type verdict struct {
	inv results.Invariants
	// effects are the durable effects: a fact of the database, not of
	// what the consumers believe they did.
	effects int64
	// external are the external service's figures, for a strategy that
	// calls it.
	external *results.External
}

// checker chooses, once, how the cell is judged: a rate search judges
// each step as it drained (stepJudge); any other cell is judged at its
// end, from its tables and the external service's call log (tableCheck).
func (c *cell) checker() checker {
	if c.o.Search != nil {
		c.steps = newStepJudge(c)
		return c.steps
	}
	return tableCheck{c}
}

// judge gives what is still parked a last chance, completes the external
// calls and the audit log, has the cell's checker judge the database, and
// adds what the deliveries' decisions show.
func (c *cell) judge(ctx context.Context, s streamed) (verdict, error) {
	// Anything still parked gets one last chance to drain (its predecessor
	// may have committed as the consumers stopped); what remains is stuck.
	// Its decisions are counted like every other: an event a snapshot
	// overtook while it waited is decided STALE here.
	outs, err := inbox.DrainParkedWith(ctx, c.strategy, c.in, c.consumer)
	if err != nil {
		c.o.Console.Log.Warn("final drain", "err", err)
	}
	c.t.countAll(outs)
	if err := c.ext.flush(ctx, c.in); err != nil {
		return verdict{}, err
	}
	if err := c.audit.finish(ctx); err != nil {
		return verdict{}, err
	}
	v, err := c.check.verdict(ctx, s.plan)
	if err != nil {
		return verdict{}, err
	}
	// The cell's tables are final: autovacuum on them would run during
	// the next cell.
	if err := inbox.Retire(ctx, c.pool, c.id); err != nil {
		c.o.Console.Log.Warn("retire the cell's schema", "err", err)
	}
	misses, examples := c.t.dedupMisses()
	judgeDecisions(&v.inv, misses, examples)
	return v, nil
}

// tableCheck judges a cell's tables (and, for a strategy that calls the
// external service, its call log) against the whole plan at the end.
type tableCheck struct{ c *cell }

func (k tableCheck) verdict(ctx context.Context, plan *workload.Plan) (verdict, error) {
	c := k.c
	snap, err := inbox.ReadSnapshot(ctx, c.pool, c.id, c.consumer, c.o.Measure.Audit)
	if err != nil {
		return verdict{}, err
	}
	var v verdict
	if c.ext != nil {
		if snap.External, err = c.ext.log(ctx); err != nil {
			return verdict{}, err
		}
		v.external = externalFigures(c.o.Spec, snap.External)
	}
	v.inv, v.effects = Judge(plan, snap, c.consumer)
	return v, nil
}
