// Package runner runs a workload through brokers into the inbox, one cell
// per broker × strategy, measures it, and checks the exactly-once-effect
// invariants against the workload's oracle.
//
// Run walks the cells round after round (rounds.go: the order of the
// cells in a round, the warm-up rounds, what a round keeps). A cell
// (cell.go) is one value: what its round needs and, once set up, what it
// runs on and counts in. It wires five parts, each in its own file with
// its own small state: the publisher (plan → broker, open loop, send-side
// faults), the consumers (goroutines of this process, or `bench worker`
// processes joining the run through PostgreSQL — chosen once per cell
// behind one interface), the handler (deliveries → inbox → verdicts,
// outcome counting), the mid-stream actions (planned restarts, broker
// restarts, killed connections) and the waiter (done, stall, progress);
// stream.go runs them. What they count meets in a tally. After the stream
// the cell's checker (check.go, chosen once per cell) judges it: the inbox
// package reads a snapshot of the cell's tables and Judge, a pure
// function, names every anomaly (judge.go). A rate search (ratesearch.go,
// ratesteps.go) runs a cell as steps at rising rates instead, each judged
// once it drained; worker processes are fleet.go, fleetconsumers.go,
// workerprocess.go and the protocol between them, workerprotocol.go.
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// NewRunID returns a sortable, readable run id.
func NewRunID() string { return time.Now().UTC().Format("20060102-150405") }

// Run executes every cell and writes result.json; the returned run is what
// was written.
func Run(ctx context.Context, o Options) (*results.Run, string, error) {
	if err := prepare(ctx, &o); err != nil {
		return nil, "", err
	}
	stopExternal, err := startExternal(ctx, &o)
	if err != nil {
		return nil, "", err
	}
	defer stopExternal()
	fl, err := startWorkers(ctx, &o)
	if err != nil {
		return nil, "", err
	}
	if fl != nil {
		defer fl.finish()
	}
	wl, err := json.Marshal(o.Spec)
	if err != nil {
		return nil, "", err
	}
	run := &results.Run{SchemaVersion: results.SchemaVersion, RunID: o.RunID, StartedAt: time.Now().UTC(),
		Workload: wl, Env: environment(o), Rounds: o.Rounds}
	rs := newRounds(&o, fl, &run.Env)
	rs.announce()
	rs.all(ctx)
	run.Cells = rs.results()
	run.Warmup, run.WarmupRounds = rs.warmup.result()
	return finish(ctx, &o, run, rs.passed)
}

// prepare checks the options, the user strategies and the run id before
// anything runs.
func prepare(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if err := checkExtras(ctx, *o); err != nil {
		return err
	}
	return claim(ctx, o)
}

// startWorkers starts the run's worker processes when its consumers are
// `bench worker`s, whose count then replaces the workload's consumers;
// nil without.
func startWorkers(ctx context.Context, o *Options) (*fleet, error) {
	if !o.Workers.any() {
		return nil, nil
	}
	spec := *o.Spec
	spec.Consumers = o.Workers.Local + o.Workers.Remote
	o.Spec = &spec
	return startFleet(ctx, *o)
}

// finish completes the run's result and writes it, then drops what the
// passed cell rounds left.
func finish(ctx context.Context, o *Options, run *results.Run, passed []results.Cell) (*results.Run, string, error) {
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
	if n, err := forgetPassed(ctx, o, passed); err != nil {
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
