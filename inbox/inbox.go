package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/external"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure an Inbox. The zero value of each field means its
// default (DefaultOptions).
type Options struct {
	// Schema holds every table (default "inboxbench"); runs use a fresh one
	// per cell.
	Schema string
	// AccountTable is the business table in Schema (default "account");
	// see EnsureAccountTable for consumers with their own target table.
	AccountTable string

	// DisableParking turns parking off: a version-ahead increment is then
	// rejected as GAP (nothing written) and must be redelivered later.
	DisableParking bool
	// ParkMaxPerAggregate bounds the parked events of one aggregate under
	// one consumer (default 1000). An event beyond the bound is rejected as
	// GAP with Outcome.ParkOverflow set and counted, never dropped.
	ParkMaxPerAggregate int
	// ParkMaxAge is how long an event may stay parked before StuckParked
	// reports it (default 1 minute).
	ParkMaxAge time.Duration

	// LockTimeout and StatementTimeout are set on every connection (default
	// 2s and 30s) so a waiter never blocks forever behind a stuck holder.
	LockTimeout      time.Duration
	StatementTimeout time.Duration

	// MaxAttempts bounds executions of one event (or batch) on retryable
	// errors (default 10); RetryBackoff is the first pause (default 10ms),
	// doubling up to MaxBackoff (default 1s), with jitter.
	MaxAttempts  int
	RetryBackoff time.Duration
	MaxBackoff   time.Duration

	// BatchSize caps the events per transaction of the batch strategy and
	// per round trip of the pipeline strategy (default 500).
	BatchSize int

	// BeforeEffect, when set, runs after an event's inbox claim and before
	// its business update in the tx, broken-split and
	// broken-check-then-insert strategies. A non-nil error fails that
	// attempt the way a crashing handler would (tx rolls back; broken-split
	// keeps its already-committed inbox row). Tests use it to reproduce the
	// article's split experiment and to widen race windows.
	BeforeEffect func(ctx context.Context, consumer string, ev *envelope.Event) error

	// External is the service beyond the database that the external
	// strategies (ext-*, broken-ext-*, strategy files with an external
	// step) call; without it they fail every event they would call for.
	External external.API
	// AfterCall, when set, runs after an external call answered and
	// before the transaction that records its outcome commits, in every
	// external strategy and the outbox relay. A non-nil error is the
	// handler dying there (the runner's crash fault): the strategy returns
	// it at once and cleans nothing up, as a dead process would not.
	AfterCall func(ctx context.Context, consumer string, ev *envelope.Event) error
	// Lease is how long ext-lease's PROCESSING claim keeps other
	// deliveries of the event away (default 5s); LeaseTakeovers bounds how
	// often an expired lease is taken over before the operation is marked
	// STUCK and reported instead (default 20).
	Lease          time.Duration
	LeaseTakeovers int
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		Schema:              DefaultSchema,
		AccountTable:        "account",
		ParkMaxPerAggregate: 1000,
		ParkMaxAge:          time.Minute,
		LockTimeout:         2 * time.Second,
		StatementTimeout:    30 * time.Second,
		MaxAttempts:         10,
		RetryBackoff:        10 * time.Millisecond,
		MaxBackoff:          time.Second,
		BatchSize:           500,
		Lease:               5 * time.Second,
		LeaseTakeovers:      20,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Schema == "" {
		o.Schema = d.Schema
	}
	if o.AccountTable == "" {
		o.AccountTable = d.AccountTable
	}
	if o.ParkMaxPerAggregate <= 0 {
		o.ParkMaxPerAggregate = d.ParkMaxPerAggregate
	}
	if o.ParkMaxAge <= 0 {
		o.ParkMaxAge = d.ParkMaxAge
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = d.LockTimeout
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = d.StatementTimeout
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = d.MaxAttempts
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = d.RetryBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = d.MaxBackoff
	}
	if o.BatchSize <= 0 {
		o.BatchSize = d.BatchSize
	}
	if o.Lease <= 0 {
		o.Lease = d.Lease
	}
	if o.LeaseTakeovers <= 0 {
		o.LeaseTakeovers = d.LeaseTakeovers
	}
	return o
}

// Parking reports whether version-ahead increments are parked.
func (o Options) Parking() bool { return !o.DisableParking }

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

// ConfigurePool sets the per-connection timeouts of opt on cfg. They travel
// as startup parameters, so they cost no round trip per transaction, and
// they apply to every statement, including the one-statement strategies
// that have no transaction to SET LOCAL in.
func ConfigurePool(cfg *pgxpool.Config, opt Options) {
	opt = opt.withDefaults()
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = millis(opt.LockTimeout)
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = millis(opt.StatementTimeout)
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "inboxbench"
	}
}

// Inbox is the inbox core bound to one schema and account table. It is safe
// for concurrent use.
type Inbox struct {
	pool     *pgxpool.Pool
	ownPool  bool
	opt      Options
	sql      sqlText
	counters counters
	part     partCache // layout and known partitions (partitioned layout)
}

// Open connects to pgURL with the timeouts of opt and returns an Inbox that
// owns the pool (Close closes it). It does not migrate: call Migrate.
func Open(ctx context.Context, pgURL string, opt Options) (*Inbox, error) {
	cfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		return nil, fmt.Errorf("inbox: PostgreSQL URL: %w", err)
	}
	ConfigurePool(cfg, opt)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("inbox: connect to PostgreSQL: %w", err)
	}
	in, err := New(pool, opt)
	if err != nil {
		pool.Close()
		return nil, err
	}
	in.ownPool = true
	return in, nil
}

// New returns an Inbox using pool, which must have been configured with
// ConfigurePool (several Inboxes, e.g. one per schema, may share it).
func New(pool *pgxpool.Pool, opt Options) (*Inbox, error) {
	opt = opt.withDefaults()
	if err := ValidateSchema(opt.Schema); err != nil {
		return nil, err
	}
	if err := ValidateSchema(opt.AccountTable); err != nil {
		return nil, fmt.Errorf("inbox: account table: %w", err)
	}
	rp := pool.Config().ConnConfig.RuntimeParams
	if rp["lock_timeout"] == "" || rp["statement_timeout"] == "" {
		return nil, errors.New("inbox: the pool has no lock_timeout/statement_timeout: build its config with inbox.ConfigurePool (or use inbox.Open) so a waiting transaction cannot block forever")
	}
	in := &Inbox{pool: pool, opt: opt}
	in.sql = buildSQL(pgx.Identifier{opt.Schema}.Sanitize(), pgx.Identifier{opt.Schema, opt.AccountTable}.Sanitize())
	return in, nil
}

// Close closes the pool if the Inbox owns it.
func (in *Inbox) Close() {
	if in.ownPool {
		in.pool.Close()
	}
}

// Pool returns the connection pool.
func (in *Inbox) Pool() *pgxpool.Pool { return in.pool }

// Options returns the effective options (defaults filled in).
func (in *Inbox) Options() Options { return in.opt }

// Schema returns the schema the Inbox works in.
func (in *Inbox) Schema() string { return in.opt.Schema }

// Counters are monotonic counts since the Inbox was created.
type Counters struct {
	Retries        int64 // retryable failures that were retried
	Parked         int64 // PARKED decisions (a re-delivery of a parked event counts again)
	Drained        int64 // parked events applied by draining
	ParkOverflow   int64 // version-ahead events rejected because the parking bound was full
	SlowPath       int64 // one-statement strategies falling back to the locked decision path
	BatchFallbacks int64 // batches redone event by event after a non-retryable failure
}

type counters struct {
	retries, parked, drained, parkOverflow, slowPath, batchFallbacks atomic.Int64
}

// Counters returns a snapshot of the counters.
func (in *Inbox) Counters() Counters {
	c := &in.counters
	return Counters{
		Retries: c.retries.Load(), Parked: c.parked.Load(), Drained: c.drained.Load(),
		ParkOverflow: c.parkOverflow.Load(), SlowPath: c.slowPath.Load(), BatchFallbacks: c.batchFallbacks.Load(),
	}
}

// Apply applies one event with strategy s under consumer.
func (in *Inbox) Apply(ctx context.Context, s Strategy, consumer string, ev *envelope.Event) (Outcome, error) {
	outs, err := s.ApplyBatch(ctx, in, consumer, []*envelope.Event{ev})
	if len(outs) != 1 {
		return Outcome{}, errors.Join(err, fmt.Errorf("inbox: strategy %s returned %d outcomes for 1 event", s.Name(), len(outs)))
	}
	return outs[0], err
}

// newOutcome starts the outcome of ev.
func newOutcome(ev *envelope.Event) Outcome {
	return Outcome{Source: ev.Source, ID: ev.ID, Subject: ev.Subject, Version: ev.AggregateVersion}
}

// validate checks what the inbox relies on; a nil event or a bad one gets
// an ErrInvalidEvent outcome instead of reaching the database.
func validate(consumer string, ev *envelope.Event) error {
	if ev == nil {
		return fmt.Errorf("inbox: consumer %q: nil event: %w", consumer, ErrInvalidEvent)
	}
	if consumer == "" {
		return fmt.Errorf("inbox: event %q: consumer name is empty: %w", ev.Key(), ErrInvalidEvent)
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("inbox: consumer %q event %q: %w: %w", consumer, ev.Key(), ErrInvalidEvent, err)
	}
	return nil
}

// eventErr names the consumer and event in an error.
func eventErr(consumer string, ev *envelope.Event, what string, err error) error {
	return fmt.Errorf("inbox: consumer %q event %q (%s v%d): %s: %w", consumer, ev.Key(), ev.Subject, ev.AggregateVersion, what, err)
}

// joinOutcomeErrors is the error ApplyBatch returns next to its outcomes.
func joinOutcomeErrors(outs []Outcome) error {
	var errs []error
	for i := range outs {
		if outs[i].Err != nil {
			errs = append(errs, outs[i].Err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	if len(errs) > 3 {
		return fmt.Errorf("%w (and %d more failed events)", errors.Join(errs[:3]...), len(errs)-3)
	}
	return errors.Join(errs...)
}
