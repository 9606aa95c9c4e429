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
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// Options of one run.
type Options struct {
	Cfg        config.Config
	Spec       *workload.Spec
	Brokers    []string
	Strategies []string
	// Extra are strategies outside the registry (user strategy files,
	// inbox.LoadStrategyFile); their cells follow Strategies' (userstrategies.go).
	Extra []inbox.Strategy
	// OutDir is the parent of the run directory (results/).
	OutDir string
	// RunID names the run (results directory, schemas, topics); one that
	// was used before is refused unless Replace drops what it left.
	RunID   string
	Replace bool
	// Measure switches latency histograms on (default); off, the run only
	// counts, to measure what measuring costs.
	Measure bool
	// Audit installs the checker's audit trigger (default on), captured as
	// AuditMode says (zero: inbox.AuditStatement).
	Audit     bool
	AuditMode inbox.AuditMode
	// Progress receives live progress; TTY selects a redrawn line instead
	// of one line every few seconds.
	Progress io.Writer
	TTY      bool
	// StallTimeout ends a cell in which no delivery settled for this long;
	// what never arrived is then reported by the checker.
	StallTimeout time.Duration
	Log          *slog.Logger
	// Args is the command line, recorded in the result with its secrets
	// redacted.
	Args []string
	// Servers maps service name to server version (the CLI asks the
	// stack), recorded in the result's env.
	Servers map[string]string
	// Plan, when set, is used instead of generating one from Spec
	// (scenarios build their own streams).
	Plan *workload.Plan
	// Poison bodies are published among the events (malformed payloads
	// the consumers must dead-letter and count, never ack silently).
	Poison [][]byte
	// NoWrite skips writing result.json (conform keeps its own file).
	NoWrite bool
	// Actions run once during each cell, when the given share of the
	// published messages has been answered (fault injection: restart the
	// broker, kill database connections …).
	Actions []Action
	// Workers, when above zero, runs each cell's consumers as that many
	// `bench worker` processes started with WorkerCmd (and started again
	// when one dies) instead of goroutines; RemoteWorkers more are
	// expected to join from elsewhere (fleet.go). Either replaces the
	// workload's consumer count.
	Workers, RemoteWorkers int
	WorkerCmd              []string
	// JoinTimeout bounds the wait for workers to join a cell.
	JoinTimeout time.Duration
	// InboxLayout selects the plain or the time-partitioned inbox.
	InboxLayout inbox.Layout
	// Search, when set, finds each cell's maximum sustainable rate instead
	// of publishing the workload once (ratesearch.go).
	Search *RateSearch
	// Backlog publishes each cell's whole stream before its consumers
	// start: events/s is then the drain rate of a backlog.
	Backlog bool
	// Durability is what a commit and the stack's profile meant where the
	// run measured (the CLI reads them: compose.FillDurability); each
	// broker's own settings are added from its driver.
	Durability *results.Durability
	// Retry bounds how long an event that keeps failing with retryable
	// errors is sent back before its delivery is dead-lettered (zero:
	// DefaultRetryBound). Failures that cannot heal are dead-lettered at
	// once; either ends the cell with the verdict ERROR.
	Retry RetryBound
}

// Validate checks the options that need no server and fills defaults; its
// errors name the option and what is accepted.
func (o *Options) Validate() error {
	if o.Spec != nil && o.Spec.FindMaxRate && o.Search == nil {
		o.Search = &RateSearch{}
	}
	switch {
	case o.Spec == nil:
		return fmt.Errorf("runner: no workload")
	case len(o.Brokers) == 0:
		return fmt.Errorf("runner: no broker: name at least one")
	case len(o.Strategies)+len(o.Extra) == 0:
		return fmt.Errorf("runner: no strategy: name at least one, or a strategy file")
	case o.Workers < 0 || o.RemoteWorkers < 0:
		return fmt.Errorf("--workers and --remote-workers count processes: 0 or more")
	case o.Retry.Attempts < 0 || o.Retry.For < 0:
		return fmt.Errorf("--retry-attempts and --retry-for bound retries: 0 (the default) or more")
	case o.Search != nil && (o.Workers > 0 || o.RemoteWorkers > 0 || len(o.Actions) > 0 || o.Backlog):
		return fmt.Errorf("--find-max-rate runs its steps with in-process consumers and no mid-stream faults: drop --workers, --remote-workers and --backlog")
	case o.Workers > 0 && len(o.WorkerCmd) == 0:
		return fmt.Errorf("runner: Options.Workers needs Options.WorkerCmd, the command that starts `bench worker`")
	}
	for _, s := range o.Strategies {
		if _, err := inbox.Lookup(s); err != nil {
			return err
		}
	}
	if o.InboxLayout.Partitioned && o.InboxLayout.Interval != 0 {
		if err := inbox.ValidatePartitionInterval(o.InboxLayout.Interval); err != nil {
			return fmt.Errorf("--partition-interval: %w", err)
		}
	}
	if o.Search != nil {
		if err := o.Search.validate(); err != nil {
			return err
		}
	}
	if o.AuditMode != "" {
		if _, err := inbox.ParseAuditMode(string(o.AuditMode)); err != nil {
			return fmt.Errorf("--audit: %w", err)
		}
	}
	if o.AuditMode == inbox.AuditOff {
		o.Audit = false
	}
	if o.RunID == "" {
		o.RunID = NewRunID()
	}
	if err := validRunID(o.RunID); err != nil {
		return err
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 30 * time.Second
	}
	if o.JoinTimeout <= 0 {
		o.JoinTimeout = 2 * time.Minute
	}
	o.quiet()
	return nil
}

// quiet discards logs and progress nobody asked for.
func (o *Options) quiet() {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

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
	var fl *fleet
	if o.Workers > 0 || o.RemoteWorkers > 0 {
		spec := *o.Spec
		spec.Consumers = o.Workers + o.RemoteWorkers
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
	plan := o.Plan
	if plan == nil {
		plan = workload.Generate(o.Spec)
	}
	names := cellStrategies(o)
	fmt.Fprintf(o.Progress, "run %s: workload %s, %d events over %d aggregates (%d sends with faults), %d cells\n",
		o.RunID, o.Spec.Name, len(plan.Events), o.Spec.Aggregates, len(plan.Publishes), len(o.Brokers)*len(names))
	for _, b := range o.Brokers {
		for _, s := range names {
			if ctx.Err() != nil {
				break
			}
			ask := run.Env.Durability == nil || run.Env.Durability.Settings[b] == nil
			c, durability := runCell(ctx, &o, plan, b, s, fl, ask)
			run.Cells = append(run.Cells, c)
			if ask {
				run.Env.AddDurability(b, durability)
			}
			fmt.Fprintf(o.Progress, "%-15s %-26s %s  %s events/s  e2e p99 %s  %s\n", b, s, c.Invariants.Verdict,
				results.FormatRate(c.Throughput.EventsPerS), fmtMicros(c.Latency.E2E.P99), strings.TrimSpace(results.AnomalyLine(c)))
		}
	}
	run.FinishedAt = time.Now().UTC()
	citeCalibration(run, o.OutDir)
	if o.NoWrite {
		return run, "", ctx.Err()
	}
	dir := filepath.Join(o.OutDir, o.RunID)
	if _, err := run.Write(dir); err != nil {
		return run, dir, fmt.Errorf("write result: %w", err)
	}
	return run, dir, ctx.Err()
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
	e := HostEnv(o.Servers)
	e.Measure, e.CommandArg = o.Measure, config.RedactArgs(o.Args)
	if o.Durability != nil {
		d := *o.Durability
		d.Settings = map[string]map[string]string{}
		for k, v := range o.Durability.Settings {
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
		if c.Throughput.Bound != "publish" || c.Baseline {
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
