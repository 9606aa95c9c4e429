package runner

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/service"
	"github.com/inboxbench/inboxbench/workload"
)

// Setting keys: how errors name the options (config.SettingError), each
// its field path in Options, so that a program can name the setting as
// its user gives it (cmd/bench maps them to its flags).
const (
	KeyRunID                  = "runner.run-id"
	KeyRounds                 = "runner.rounds"
	KeyWarmupRounds           = "runner.warmup_rounds"
	KeyWarmupFor              = "runner.warmup_rounds_for"
	KeyReplace                = "runner.replace"
	KeyAuditMode              = "runner.measure.audit-mode"
	KeyRetryAttempts          = "runner.limits.retry.attempts"
	KeyRetryFor               = "runner.limits.retry.for"
	KeyBacklog                = "runner.stream.backlog"
	KeyCrashWithBacklog       = "runner.stream.crash-with-backlog"
	KeyActions                = "runner.stream.actions"
	KeySearch                 = "runner.search"
	KeySearchFractions        = "runner.search.fractions"
	KeySearchRates            = "runner.search.rates"
	KeySearchMaxBacklogGrowth = "runner.search.max-backlog-growth"
	KeySearchPrecision        = "runner.search.precision"
	KeyWorkersLocal           = "runner.workers.local"
	KeyWorkersRemote          = "runner.workers.remote"
	KeyPartitionInterval      = "runner.inbox.interval"
)

// Options of one run: its cells, every broker × strategy of one workload,
// then how they run and what is recorded, grouped by concern.
type Options struct {
	Cfg config.Config // PostgreSQL's and the brokers' endpoints
	// Spec is the workload; Brokers and Strategies (registered names,
	// inbox.Lookup) make the cells, every broker with every strategy.
	Spec       *workload.Spec
	Brokers    []string
	Strategies []string
	// Extra are strategies outside the registry (user strategy files,
	// inbox.LoadStrategyFile); their cells follow Strategies' (userstrategies.go).
	Extra []inbox.Strategy
	// RunID names the run (results directory, schemas, topics); one that
	// was used before is refused unless Replace drops what it left.
	RunID   string
	Replace bool
	// KeepData keeps the schemas and topics of the cells that passed; by
	// default a run that writes result.json drops them then (runid.go).
	KeepData bool
	// Rounds measures every cell this many times (zero: the workload's
	// rounds, else once; once for a rate search), interleaved: all cells
	// once per round, in an order that puts every cell in every place
	// equally often over the rounds (order.go), so that a drift of the
	// machine over the run (a JVM warming, caches, the disk) and what one
	// cell leaves the next weigh on every cell alike. Each round of a cell
	// starts from the same state: a schema and a topic of its own, right
	// after a checkpoint.
	Rounds int
	// WarmupRounds are rounds of every cell run first, interleaved like
	// the others, and not kept: a freshly started JVM broker keeps
	// getting faster for minutes, longer than a cell's own warm-up waits.
	// A warm-up cell that fails its checks is kept (as round 0), so that
	// its verdict counts. Negative: the workload's (none for a rate
	// search).
	WarmupRounds int
	// WarmupFor, above zero, makes the warm-up rounds go on while a
	// cell's rate still rises from one to the next (each cell at least
	// two, or WarmupRounds), for at most this long (warmup.go); zero: a
	// fixed count of WarmupRounds. Negative: the workload's
	// (warmup_rounds_for).
	WarmupFor time.Duration

	Output  Output       // where result.json goes and what it records
	Measure Measure      // latency histograms and the checker's audit log
	Limits  Limits       // how long a cell waits for progress, and retries an event
	Stream  Stream       // what a cell publishes beside the workload's plan, and when
	Search  *RateSearch  // when set: each cell's maximum sustainable rate instead of one stream (ratesearch.go)
	Workers Workers      // the consumers as `bench worker` processes instead of goroutines (fleet.go)
	Inbox   inbox.Layout // the plain or the time-partitioned inbox
	// External is the service beyond the database that external
	// strategies call (external.go).
	External ExternalService
	// Service, when set, is a team's own consumer service under test: on
	// every broker it consumes from, a cell of its own ("service:NAME")
	// runs beside the strategies' cells, its instances consuming the same
	// plan (service.go).
	Service *service.Spec
	Console Console // live progress and logs
}

// Output is where a run's result goes and what it records of where the
// run measured.
type Output struct {
	// Dir is the parent of the run directory (results/).
	Dir string
	// NoWrite skips writing result.json (conform keeps its own file).
	NoWrite bool
	// Args is the command line, recorded with its secrets redacted.
	Args []string
	// Servers maps service name to server version (the CLI asks the
	// stack), recorded in the result's env.
	Servers map[string]string
	// ServerNotes are what the CLI found of where the servers ran (a
	// local server limited to some of the host's CPUs), recorded in the
	// env's notes.
	ServerNotes []string
	// Durability is what a commit and the stack's profile meant where the
	// run measured (the CLI reads them: compose.FillDurability); each
	// broker's own settings are added from its driver.
	Durability *results.Durability
}

// Measure is what a cell measures beside its counts.
type Measure struct {
	// Latency switches latency histograms on (the CLI's default); off,
	// the run only counts, to measure what measuring costs.
	Latency bool
	// Audit installs the checker's audit log (the CLI's default), captured
	// as AuditMode says (zero: auto, the WAL where the server allows it,
	// else the statement trigger: inbox.ResolveAudit).
	Audit     bool
	AuditMode inbox.AuditMode
}

// Limits bound how long a cell waits.
type Limits struct {
	// Stall ends a cell in which no delivery settled for this long (zero:
	// 30 s); what never arrived is then reported by the checker.
	Stall time.Duration
	// Retry bounds how long an event that keeps failing with retryable
	// errors is sent back before its delivery is dead-lettered (zero:
	// DefaultRetryBound). Failures that cannot heal are dead-lettered at
	// once; either ends the cell with the verdict ERROR.
	Retry RetryBound
	// Quiet bounds how long a cell measured for a time (a steady cell, a
	// rate search) waits before it starts for the host to go quiet
	// (runner/quiet.go); zero starts it at once. `bench run` waits up to
	// 20 s.
	Quiet time.Duration
}

// Stream is how a cell's stream departs from publishing the workload's
// plan once, at the workload's rate, while the consumers consume it.
type Stream struct {
	// Plan, when set, is used instead of generating one from Spec
	// (scenarios build their own streams).
	Plan *workload.Plan
	// Poison bodies are published among the events (malformed payloads
	// the consumers must dead-letter and count, never ack silently).
	Poison [][]byte
	// Backlog publishes each cell's whole stream before its consumers
	// start: events/s is then the drain rate of a backlog.
	Backlog bool
	// CrashWithBacklog is the crash-with-backlog fault: this many times
	// per cell a consumer dies — a worker process kills itself with kill
	// -9, an in-process one tears its subscription down (brokers.Crash) —
	// with a batch in its handler, unhandled, once its subscription holds
	// a backlog beyond it (brokers.HoldForBacklog): the first calls of
	// the cell claim the crashes, one per subscription (handler.go).
	CrashWithBacklog int
	// Actions run once during each cell, when the given share of the
	// published messages has been answered (fault injection: restart the
	// broker, kill database connections …).
	Actions []Action
	// Failover makes the action of each failover fault of the workload's
	// plan (workload.Faults.Failover), which then runs with Actions:
	// package failover hits the nodes of the local replicated stack. A
	// plan with failover faults needs it.
	Failover FailoverInjector
}

// FailoverInjector returns the action that carries out a failover fault.
type FailoverInjector func(f workload.FailoverFault) (Action, error)

// Workers run each cell's consumers as `bench worker` processes instead
// of goroutines (fleet.go); their count replaces the workload's consumer
// count.
type Workers struct {
	// Local processes are started with Cmd (and started again when one
	// dies); Remote more are expected to join from elsewhere.
	Local, Remote int
	Cmd           []string
	// JoinTimeout bounds the wait for workers to join a cell (zero: 2 min).
	JoinTimeout time.Duration
}

// any says whether the cells' consumers are worker processes.
func (w Workers) any() bool { return w.Local > 0 || w.Remote > 0 }

// Console is what the person running the run sees.
type Console struct {
	// Progress receives live progress; TTY selects a redrawn line instead
	// of one line every few seconds.
	Progress io.Writer
	TTY      bool
	// Log takes warnings that change no figure (nil: discarded).
	Log *slog.Logger
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
	case len(o.Strategies)+len(o.Extra) == 0 && o.Service == nil:
		return fmt.Errorf("runner: no strategy: name at least one, or a strategy file, or a service")
	case o.Rounds < 0 || o.Rounds > 100:
		return config.Invalid(KeyRounds, o.Rounds, "use 1 to 100")
	case o.WarmupRounds > 10:
		return config.Invalid(KeyWarmupRounds, o.WarmupRounds, "use 0 to 10")
	case o.WarmupFor > time.Hour:
		return config.Invalid(KeyWarmupFor, o.WarmupFor, "use 0 (a fixed count of warm-up rounds) to 1h")
	case o.Spec.Steady() && o.Stream.Backlog:
		return config.Invalid(KeyBacklog, nil, "the workload measures a steady window (measure): a backlog drain has no steady state; remove measure or the backlog")
	case o.Workers.Local < 0:
		return config.Invalid(KeyWorkersLocal, o.Workers.Local, "counts processes: 0 or more")
	case o.Workers.Remote < 0:
		return config.Invalid(KeyWorkersRemote, o.Workers.Remote, "counts processes: 0 or more")
	case o.Stream.CrashWithBacklog < 0:
		return config.Invalid(KeyCrashWithBacklog, o.Stream.CrashWithBacklog, "counts consumer crashes per cell: 0 or more")
	case o.Limits.Retry.Attempts < 0:
		return config.Invalid(KeyRetryAttempts, o.Limits.Retry.Attempts, "bounds retries: 0 (the default) or more")
	case o.Limits.Retry.For < 0:
		return config.Invalid(KeyRetryFor, o.Limits.Retry.For, "bounds retries: 0 (the default) or more")
	case o.Search != nil && (o.Workers.any() || len(o.Stream.Actions) > 0 || o.Stream.Backlog):
		return config.Invalid(KeySearch, nil, "the rate search runs its steps with in-process consumers, no backlog and no mid-stream faults: unset %s", strings.Join(o.unsearchable(), ", "))
	case o.Service != nil && o.Search != nil:
		return config.Invalid(KeySearch, nil, "a service under test is measured at the workload's rate or saturated; the rate search runs the suite's own consumers only: drop one of them")
	case o.Workers.Local > 0 && len(o.Workers.Cmd) == 0:
		return fmt.Errorf("runner: Options.Workers.Local needs Options.Workers.Cmd, the command that starts `bench worker`")
	}
	for _, s := range o.Strategies {
		if _, err := inbox.Lookup(s); err != nil {
			return err
		}
	}
	if err := o.validateExternal(); err != nil {
		return err
	}
	if o.Inbox.Partitioned && o.Inbox.Interval != 0 {
		if err := inbox.ValidatePartitionInterval(o.Inbox.Interval); err != nil {
			return &config.SettingError{Key: KeyPartitionInterval, Err: err}
		}
	}
	if o.Search != nil {
		if err := o.Search.validate(); err != nil {
			return err
		}
	}
	if o.Measure.AuditMode != "" {
		if _, err := inbox.ParseAuditMode(string(o.Measure.AuditMode)); err != nil {
			return &config.SettingError{Key: KeyAuditMode, Err: err}
		}
	}
	if o.Measure.AuditMode == inbox.AuditOff {
		o.Measure.Audit = false
	}
	if err := o.failoverDefaults(); err != nil {
		return err
	}
	if o.WarmupRounds < 0 {
		o.WarmupRounds = o.Spec.WarmupRounds
		if o.Search != nil {
			o.WarmupRounds = 0
		}
	}
	if o.WarmupFor < 0 {
		o.WarmupFor = o.Spec.WarmupRoundsFor.D()
	}
	if o.Rounds == 0 {
		o.Rounds = max(1, o.Spec.Rounds)
		if o.Search != nil {
			// A search repeats its own steps near the boundary and
			// confirms its answer; the workload's rounds are for cells
			// of one stream (five searches of three cells would take
			// an hour and a half). --rounds still asks for more.
			o.Rounds = 1
		}
	}
	if o.RunID == "" {
		o.RunID = NewRunID()
	}
	if err := validRunID(o.RunID); err != nil {
		return err
	}
	if o.Limits.Stall <= 0 {
		o.Limits.Stall = 30 * time.Second
	}
	if o.Workers.JoinTimeout <= 0 {
		o.Workers.JoinTimeout = 2 * time.Minute
	}
	o.Console.quiet()
	return nil
}

// validateExternal refuses what the external strategies cannot run: they
// do not park (a version-ahead event is retried by redelivery, which a
// reordered stream would wedge), do not take client idempotency keys, and
// a rate search does not judge their calls.
func (o *Options) validateExternal() error {
	for _, n := range cellStrategies(*o) {
		st, err := lookupStrategy(*o, n)
		if err != nil || !inbox.CallsExternal(st) {
			continue
		}
		f := o.Spec.Faults
		switch {
		case o.Search != nil:
			return config.Invalid(KeySearch, nil, "%s calls an external service, and the rate search does not judge external calls: run it without the rate search", n)
		case f.OutOfOrder > 0 || f.IdempotencyConflicts > 0:
			return fmt.Errorf("runner: strategy %s calls an external service and neither parks version-ahead events nor takes client idempotency keys: workload %s must not set faults.out_of_order or faults.idempotency_conflicts", n, o.Spec.Name)
		}
	}
	return nil
}

// failoverDefaults fits the audit and the retry bound to a fault plan
// with failover faults: a PostgreSQL failover empties an unlogged audit
// log and drops a logical slot, so such cells keep a logged one (an
// explicit unlogged mode is refused); and an event whose apply fails
// while a primary is down is retried for the whole retry time, not only
// a few attempts (DefaultRetryBound's five take about a second).
func (o *Options) failoverDefaults() error {
	f := o.Spec.Faults
	switch {
	case len(f.Failover) == 0:
		return nil
	case o.Search != nil:
		return config.Invalid(KeySearch, nil, "workload %s has failover faults (faults.failover), and the rate search runs its steps without mid-stream faults: run it without the rate search", o.Spec.Name)
	case o.Stream.Failover == nil:
		return fmt.Errorf("runner: workload %s has failover faults (faults.failover) and nothing injects them (Options.Stream.Failover)", o.Spec.Name)
	}
	if o.Limits.Retry.Attempts == 0 {
		o.Limits.Retry.Attempts = failoverRetryAttempts
	}
	if !f.HitsPostgres() || !o.Measure.Audit {
		return nil
	}
	switch o.Measure.AuditMode {
	case inbox.AuditAuto, "":
		o.Measure.AuditMode = inbox.AuditLogged
	case inbox.AuditLogged:
	default:
		return config.Invalid(KeyAuditMode, string(o.Measure.AuditMode), "workload %s fails PostgreSQL over (faults.failover), and a %s audit log does not survive the promotion: use logged (or auto, which chooses it)", o.Spec.Name, o.Measure.AuditMode.Describe())
	}
	return nil
}

// failoverRetryAttempts bounds the attempts of an event across failovers
// by time rather than count: the retry time (DefaultRetryBound.For)
// decides.
const failoverRetryAttempts = 10000

// unsearchable names the options set that a rate search cannot run with.
func (o *Options) unsearchable() []string {
	var keys []string
	for _, k := range []struct {
		key string
		set bool
	}{{KeyWorkersLocal, o.Workers.Local > 0}, {KeyWorkersRemote, o.Workers.Remote > 0},
		{KeyBacklog, o.Stream.Backlog}, {KeyActions, len(o.Stream.Actions) > 0}} {
		if k.set {
			keys = append(keys, k.key)
		}
	}
	return keys
}

// quiet discards logs and progress nobody asked for.
func (c *Console) quiet() {
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}
