// Package results holds the result model written to
// results/<run-id>/result.json (and conform.json, calibrate.json), its
// loading and saving, the comparison of two runs and the trends of many.
// Field names are contracts (docs/results.md): reports, `bench compare`
// and users' scripts read them. The writers (Markdown, HTML, CSV,
// charts, the terminal tables, the published site) are in results/render,
// so the packages that measure do not carry templates and a chart library.
package results

import (
	"encoding/json"
	"time"
)

// SchemaVersion is bumped on any incompatible change of the JSON shape.
const SchemaVersion = 1

// Run is one result.json.
type Run struct {
	SchemaVersion int       `json:"schema_version"`
	RunID         string    `json:"run_id"`
	StartedAt     time.Time `json:"started_at"`
	FinishedAt    time.Time `json:"finished_at"`
	Env           Env       `json:"env"`
	// Workload is the resolved spec (every default filled in).
	Workload json.RawMessage `json:"workload"`
	// Rounds is how often every cell was measured, interleaved (0 or 1:
	// once); each cell then holds its rounds.
	Rounds int `json:"rounds,omitempty"`
	// WarmupRounds ran before the measured rounds and are not in the
	// cells (a warm-up cell that failed its checks is, as a round 0):
	// the most that any cell ran. Warmup says how each cell's went.
	WarmupRounds int      `json:"warmup_rounds,omitempty"`
	Warmup       []Warmup `json:"warmup,omitempty"`
	Cells        []Cell   `json:"cells"`
}

// Env describes where the figures were measured.
type Env struct {
	GoVersion  string            `json:"go"`
	Postgres   string            `json:"postgres"`
	Brokers    map[string]string `json:"brokers"` // broker name → server version
	Clients    map[string]string `json:"clients"` // client library → module version
	Cores      int               `json:"cores"`
	MemoryMiB  int64             `json:"memory_mib"`
	OS         string            `json:"os"`
	GitCommit  string            `json:"git_commit"`
	Hostname   string            `json:"hostname"`
	Measure    bool              `json:"measurement"` // false when measurement was switched off
	Notes      []string          `json:"notes,omitempty"`
	CommandArg []string          `json:"command,omitempty"`
	// Durability says what a confirm and a commit meant where the figures
	// were measured; nil when the run did not record it.
	Durability *Durability `json:"durability,omitempty"`
}

// Durability is the durability profile of the servers a run measured:
// whether a broker confirmed and PostgreSQL committed only after the data
// reached disk. Runs of different profiles measure different guarantees,
// so the published trends never join them (see results/trend.go).
type Durability struct {
	// Profile names the profile as the stack set it (e.g. "fsync" when
	// every server syncs before it confirms, "os" when none does); empty
	// when the servers were configured by hand.
	Profile string `json:"profile,omitempty"`
	// Settings are the settings that decide what a confirm means, by
	// component (DurabilityPostgres, then the brokers by name: "kafka",
	// "rabbitmq", "rocketmq"), then by setting name (e.g.
	// "synchronous_commit", "acks", "flushDiskType").
	Settings map[string]map[string]string `json:"settings,omitempty"`
}

// DurabilityPostgres is PostgreSQL's key in Durability.Settings.
const DurabilityPostgres = "postgres"

// AddDurability records a service's durability settings in the run's
// Durability (created when missing); nil or empty m is ignored.
func (e *Env) AddDurability(service string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	if e.Durability == nil {
		e.Durability = &Durability{}
	}
	if e.Durability.Settings == nil {
		e.Durability.Settings = map[string]map[string]string{}
	}
	e.Durability.Settings[service] = m
}

// Cell is one broker × strategy run.
type Cell struct {
	Broker   string `json:"broker"`
	Strategy string `json:"strategy"`
	// StrategyFile and StrategyHash are a user strategy file's base name
	// (NAME.sql) and the first 8 hex digits of the SHA-256 of its content,
	// which Strategy (file:NAME.sql@HASH) ends in; empty for a built-in
	// strategy and in files written before they were recorded.
	StrategyFile string `json:"strategy_file,omitempty"`
	StrategyHash string `json:"strategy_hash,omitempty"`
	// Broken marks negative-control strategies (expected to FAIL).
	Broken bool `json:"broken"`
	// Baseline marks cells of a driver with no transport (none): the
	// database alone, the reference of "vs none".
	Baseline   bool       `json:"baseline,omitempty"`
	Consumer   string     `json:"consumer"`
	Schema     string     `json:"schema"`
	DurationS  float64    `json:"duration_s"`
	Throughput Throughput `json:"throughput"`
	Latency    Latencies  `json:"latency"`
	Counters   Counters   `json:"counters"`
	Contention Contention `json:"contention"`
	Invariants Invariants `json:"invariants"`
	// Audit is how the checker's audit log was captured in this cell
	// ("wal-decoding, unlogged", "statement-trigger, unlogged",
	// "row-trigger, unlogged"), or "off"; empty in files written before it
	// was recorded.
	Audit string `json:"audit,omitempty"`
	Error string `json:"error,omitempty"`
	// Mode is how the cell published (a saturated cell's latency is
	// queueing-dominated: read it as a throughput run).
	Mode Mode `json:"mode,omitempty"`
	// Rate is a rate-search cell's search.
	Rate *RateSearch `json:"rate,omitempty"`
	// Failures are the first failure of each kind among the events the
	// inbox could not decide (a retryable one within its bound is sent
	// back; others are dead-lettered and make the verdict ERROR).
	Failures []Failure `json:"failures,omitempty"`
	// Notes are what happened to the cell besides its figures (injected
	// faults and their outcome).
	Notes []string `json:"notes,omitempty"`
	// Window is a steady-state cell's warm-up and measured window
	// (workloads with measure); absent for a cell run for its events.
	Window *Window `json:"window,omitempty"`
	// Round is the round that measured this cell (1, 2 …) and Order its
	// place in that round (1: first), when a run measures every cell
	// several times (bench run --rounds); both 0 in a run of one round.
	Round int `json:"round,omitempty"`
	Order int `json:"order,omitempty"`
	// Rounds are the measurements of a cell measured more than once, each
	// a cell of its own. The cell's own figures are then the rounds'
	// medians (Aggregate), and Stats their confidence intervals.
	Rounds []Cell     `json:"rounds,omitempty"`
	Stats  *CellStats `json:"stats,omitempty"`
	// External is what the external service saw of a cell whose strategy
	// calls it (absent otherwise): its delay, and its call log counted by
	// outcome, apart from the deliveries, executions and database effects
	// in Counters.
	External *External `json:"external,omitempty"`
	// Faults are the mid-stream faults the cell injected, each with when
	// it hit and its outage (failover.go); Timeline the per-second series
	// their figures come from.
	Faults   []Fault   `json:"faults,omitempty"`
	Timeline *Timeline `json:"timeline,omitempty"`
	// Service is the service under test whose instances consumed the
	// cell (absent for the suite's own consumer): its figures come from
	// its tables alone, so Counters hold what the publisher sent and the
	// effects the WAL showed, nothing the service counted itself.
	Service *ServiceRun `json:"service,omitempty"`
}

// ServiceRun is the service under test of a cell.
type ServiceRun struct {
	// Name is the spec's name (Strategy reads "service:NAME"), Spec the
	// spec file, Instances how many instances consumed.
	Name      string `json:"name"`
	Spec      string `json:"spec"`
	Instances int    `json:"instances"`
	// Kills counts the instances the cell's faults killed (kill -9) and
	// started again; Exits those that exited on their own and were
	// started again.
	Kills int64 `json:"kills"`
	Exits int64 `json:"exits"`
	// Logs is the directory of the instances' output.
	Logs string `json:"logs,omitempty"`
}

// CellStats are the medians of a cell's rounds with their confidence
// intervals (Estimate): what a figure is, and how much it moved.
type CellStats struct {
	EventsPerS Estimate `json:"events_per_s"`
	// VsBaseline is the median of the per-round ratios to the baseline
	// cell of the same strategy (absent for the baseline itself).
	VsBaseline    *Estimate `json:"vs_baseline,omitempty"`
	E2EP50        Estimate  `json:"e2e_p50"`
	E2EP99        Estimate  `json:"e2e_p99"`
	PublishP99    Estimate  `json:"publish_p99"`
	PublishLagP99 Estimate  `json:"publish_lag_p99"`
	DedupP99      Estimate  `json:"dedup_p99"`
	LockWaitShare Estimate  `json:"lock_wait_share"`
	// NotSteady counts the rounds whose window was not steady.
	NotSteady int `json:"not_steady,omitempty"`
	// Trend judges the rounds' windows together (steady-state cells of
	// two rounds or more).
	Trend *RoundsTrend `json:"trend,omitempty"`
	// Rise judges the rounds' rates in the order they ran: a cell that
	// got faster from round to round is still warming up (five measured
	// rounds or more).
	Rise *RoundsRise `json:"rise,omitempty"`
	// Disagree says the rounds spread the median events/s beyond
	// ±RoundsSpreadMax (three rounds or more): not a figure a second run
	// would repeat.
	Disagree bool `json:"disagree,omitempty"`
}

// Throughput is durable effects per second, overall (after warm-up) and as
// a per-second series from the start of consumption.
type Throughput struct {
	EventsPerS float64   `json:"events_per_s"`
	Series     []float64 `json:"series"`
	// PublishedPerS is the rate at which the broker confirmed the stream
	// while it was being published.
	PublishedPerS float64 `json:"published_per_s,omitempty"`
	// VsBaseline is events/s over the baseline cell's (same strategy,
	// same round): the share of the database alone that the path through
	// the broker keeps; absent for the baseline itself.
	VsBaseline float64 `json:"vs_baseline,omitempty"`
	// Bound says what limited the cell.
	Bound Bound `json:"bound,omitempty"`
	// HostCPUBusy is the share of the host's CPU time that was busy (all
	// processes) from the start of publishing to the end of the cell, on
	// Linux. Near 1, every component on the machine competes for the same
	// cores: the broker's own CPU is taken from the database.
	HostCPUBusy float64 `json:"host_cpu_busy,omitempty"`
}

// Latencies in microseconds.
type Latencies struct {
	E2E     Summary `json:"e2e"`     // intended publish time → database commit
	Publish Summary `json:"publish"` // send → broker confirm
	// PublishLag is how late each message was handed to the broker after
	// its intended send time: the publisher's own queueing, which e2e
	// includes (0 for a publisher that kept its schedule).
	PublishLag Summary `json:"publish_lag,omitzero"`
	// Sched is how long the harness's runnable goroutines waited for a
	// CPU (the Go runtime's scheduling latencies) from the start of
	// publishing to the end of the cell: on a host that the services
	// share, a part of every latency measured from an intended time, the
	// publish lag's first of all.
	Sched Summary `json:"sched,omitzero"`
	Apply Summary `json:"apply"` // inbox transaction
	Dedup Summary `json:"dedup"` // delivery → DUPLICATE decision → ack
	// ApplyByResult splits apply latency by result kind.
	ApplyByResult map[string]Summary `json:"apply_by_result,omitempty"`
	// Spectrum is the e2e and dedup percentile spectrum for charts:
	// percentile → microseconds.
	Spectrum map[string][]Point `json:"spectrum,omitempty"`
	// ExternalCall is the round trip of each answered external call as
	// its caller saw it; ExternalE2E is from the intended publish time to
	// the external call's answer (for the outbox, after its relay): e2e
	// of the effect beyond the database.
	ExternalCall Summary `json:"external_call,omitzero"`
	ExternalE2E  Summary `json:"external_e2e,omitzero"`
}

// Summary of one latency histogram, in microseconds.
type Summary struct {
	Count int64 `json:"count"`
	P50   int64 `json:"p50"`
	P90   int64 `json:"p90"`
	P99   int64 `json:"p99"`
	P999  int64 `json:"p999"`
	Max   int64 `json:"max"`
}

// Point is one percentile of a spectrum.
type Point struct {
	Percentile float64 `json:"p"`
	Micros     int64   `json:"us"`
}

// Counters are kept apart as the article asks: deliveries, handler
// executions and durable effects are different things.
type Counters struct {
	Published    int64 `json:"published"`
	Deliveries   int64 `json:"deliveries"`
	Executions   int64 `json:"executions"`
	Effects      int64 `json:"effects"`
	Duplicates   int64 `json:"duplicates"`
	Redeliveries int64 `json:"redeliveries"`
	Gaps         int64 `json:"gaps"`
	Parked       int64 `json:"parked"`
	Stale        int64 `json:"stale"`
	Conflicts    int64 `json:"conflicts"`
	Retries      int64 `json:"retries"`
	Errors       int64 `json:"errors"`
	Crashes      int64 `json:"crashes"`
	Rejected     int64 `json:"rejected"`
	// Failed counts deliveries dead-lettered because applying their event
	// failed (Rejected counts malformed ones).
	Failed int64 `json:"failed"`
	// PublishRetries counts batches sent again after a failed confirm.
	PublishRetries int64 `json:"publish_retries"`
}

// Contention is what the sampler saw during the cell.
type Contention struct {
	Samples int `json:"samples"`
	// LockWaitSamples counts, per wait event (e.g. "Lock/transactionid"),
	// how many sampled backends of the run were waiting on it.
	LockWaitSamples map[string]int64 `json:"lock_wait_samples"`
	// LockWaitShare is the share of sampled backend states that were lock
	// waits (0..1).
	LockWaitShare float64     `json:"lock_wait_share"`
	BlockedMax    int         `json:"blocked_max"`
	Deadlocks     int64       `json:"deadlocks"`
	Rollbacks     int64       `json:"rollbacks"`
	Commits       int64       `json:"commits"`
	TopStatements []Statement `json:"top_statements"`
	Series        []WaitPoint `json:"series,omitempty"`
}

// Statement is one pg_stat_statements row for the cell.
type Statement struct {
	Query string `json:"query"`
	Calls int64  `json:"calls"`
	// Rows is what the calls returned or changed (pg_stat_statements'
	// rows); absent in files written before it was recorded.
	Rows    int64   `json:"rows,omitempty"`
	MeanMs  float64 `json:"mean_ms"`
	TotalMs float64 `json:"total_ms"`
}

// WaitPoint is one sample over time.
type WaitPoint struct {
	AtS     float64          `json:"t"`
	Waiting map[string]int64 `json:"waiting"`
	Blocked int              `json:"blocked"`
}

// RateSearch is the maximum sustainable rate (MSR) of a cell and how it
// was found: open-loop steps at rising rates, then bisection, then
// latency at fixed fractions of the MSR.
type RateSearch struct {
	// MSR is the highest rate, in events/s, whose step was sustainable.
	MSR float64 `json:"msr"`
	// LimitedBy is the criterion the lowest unsustainable step failed
	// (publish, backlog, p99), or the bound the search stopped at first
	// (steps, time, floor).
	LimitedBy Limit        `json:"limited_by"`
	Criteria  RateCriteria `json:"criteria"`
	Steps     []RateStep   `json:"steps"`
	// At are the steps at fixed fractions of the MSR (or absolute rates).
	At []RateStep `json:"at,omitempty"`
	// Confirmed: the MSR's step was sustainable at least twice and never
	// more often not; Uncertain says why it is not confirmed, or where
	// repeated steps disagreed.
	Confirmed bool   `json:"confirmed,omitempty"`
	Uncertain string `json:"uncertain,omitempty"`
}

// RateCriteria say when a step is sustainable.
type RateCriteria struct {
	StepS float64 `json:"step_s"`
	// MaxBacklogGrowth is the largest backlog growth per second, as a
	// share of the rate (0.05: 5% of the rate).
	MaxBacklogGrowth float64 `json:"max_backlog_growth"`
	// MaxPublishLagMs bounds how late the publisher may fall behind its
	// schedule; the achieved rate must also reach 95% of the step's.
	MaxPublishLagMs float64 `json:"max_publish_lag_ms"`
	MaxP99Us        int64   `json:"max_p99_us"`
	// Precision ends the bisection: (lowest failing − highest passing)
	// / highest passing.
	Precision float64 `json:"precision"`
}

// RateStep is one open-loop step.
type RateStep struct {
	// Phase is "ramp", "bisect", "confirm" (the bracket's sustainable end
	// measured again), "recheck" (a rate found unsustainable below one
	// found sustainable, measured again) or "at".
	Phase string `json:"phase"`
	// Fraction of the MSR, for an "at" step with one.
	Fraction float64 `json:"fraction,omitempty"`
	Rate     float64 `json:"rate"`
	Achieved float64 `json:"achieved"`
	// BacklogSlope is the backlog's growth in events/s over the step's
	// measured window (least squares): ~0 when consumers keep up.
	BacklogSlope float64 `json:"backlog_slope"`
	// PublishLagMs is the p99 of how late messages of the window were
	// handed to the broker (the publisher falling behind its schedule).
	PublishLagMs float64 `json:"publish_lag_ms"`
	// WarmupS is how long the step warmed up (until its effect rate
	// settled at the step's rate, or its limit), WindowS the window it
	// was judged on.
	WarmupS       float64 `json:"warmup_s,omitempty"`
	WindowS       float64 `json:"window_s,omitempty"`
	E2E           Summary `json:"e2e"`
	Dedup         Summary `json:"dedup"`
	LockWaitShare float64 `json:"lock_wait_share"`
	Sustainable   bool    `json:"sustainable"`
	// Limit names the criterion an unsustainable step failed.
	Limit Limit `json:"limit,omitempty"`
	// DrainS is how long the backlog took to drain after publishing.
	DrainS float64 `json:"drain_s"`
}

// Failure is the first failure of one kind while applying events, with how
// often that kind happened.
type Failure struct {
	// Kind is the PostgreSQL condition name (division_by_zero …), or
	// invalid_event, beyond_retention, connection, internal.
	Kind     string `json:"kind"`
	SQLState string `json:"sqlstate,omitempty"`
	Message  string `json:"message"`
	// Where is the strategy file statement that failed, path:line
	// @section statement N.
	Where string `json:"where,omitempty"`
	// Event is the id of the first event it happened to.
	Event     string `json:"event"`
	Retryable bool   `json:"retryable"`
	// Count counts handler calls that failed so; DeadLettered the
	// deliveries given up on.
	Count        int64 `json:"count"`
	DeadLettered int64 `json:"dead_lettered"`
}

// Invariants is the checker's verdict.
type Invariants struct {
	Verdict   Verdict             `json:"verdict"` // PASS or FAIL; ERROR when the cell did not complete
	Anomalies map[string]int64    `json:"anomalies"`
	Examples  map[string][]string `json:"examples"`
}

// Write stores r as dir/result.json.
func (r *Run) Write(dir string) (string, error) { return writeRunFile(dir, ResultFile, r) }

// Read loads a run directory's result.json (or the file itself).
func Read(path string) (*Run, error) {
	var r Run
	if err := readRunFile(path, ResultFile, &r, &r.SchemaVersion, SchemaVersion); err != nil {
		return nil, err
	}
	return &r, nil
}
