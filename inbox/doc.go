// Package inbox is the PostgreSQL inbox core every broker feeds: schema and
// migrations, Apply with interchangeable strategies, parking of
// version-ahead events, request idempotency keys, retention and statistics.
// It knows nothing about brokers.
//
// # Identity and the inbox transaction
//
// An event is identified by its CloudEvents (source, id) pair, and dedup is
// per processing responsibility: the inbox primary key is
// (consumer, source, event_id) — not the event id alone (consumers would
// dedup each other) and not the aggregate id (later events of the
// aggregate would be blocked). The inbox row and the business change commit
// in one transaction, and the primary key, not a prior SELECT, arbitrates
// between concurrent deliveries. Every decision is taken from affected-row
// counts; an update that matched no row is never success.
//
// # Results
//
// Apply decides APPLIED, DUPLICATE, GAP, STALE, CONFLICT or PARKED (see
// Result). Only APPLIED changes business state, and only APPLIED (and a
// drained parked event) leaves an inbox row: GAP, STALE and CONFLICT roll
// back, claim included, so the event can be processed once order is
// repaired and the inbox never claims an effect that did not happen. An
// event with Outcome.Err was not decided and must be redelivered.
//
// # Accounts
//
// The business table is account(id, balance, version). An account comes
// into existence with its version-1 increment (an upsert that also accepts
// a pre-created (id, 0, 0) row, as the article's experiments reset
// order-42), or with a snapshot. The decision path and the batch strategy
// create (id, 0, 0) when they need a row to lock, so a checker must read a
// missing account and (id, 0, 0) alike.
//
// # Versions, snapshots and parking
//
// An increment applies only at version = current+1 (UPDATE … WHERE
// version = v-1). On 0 rows the version is read under a row lock: at or
// below current is STALE; current+1 means the predecessor just committed
// and the update is retried; beyond is a gap. With parking on (the
// default), a gap is stored in the parked table in the same transaction
// and PARKED; the transaction that applies its predecessor drains parked
// successors in version order, each with its own inbox row. Parking is
// bounded per aggregate (Options.ParkMaxPerAggregate; beyond it the event
// is a GAP with Outcome.ParkOverflow, counted in Counters) and by age
// (StuckParked lists events parked longer than Options.ParkMaxAge, for the
// checker's parked-stuck anomaly). Nothing parked is ever dropped. With
// parking off a gap is GAP and nothing is written.
//
// Snapshot events (Kind snapshot) are keep-latest: a strictly newer version
// overwrites balance and version, an older or equal one is STALE. Dedup is
// still the inbox's. A snapshot drains parked increments after it and
// removes the ones it overtook.
//
// # Idempotency keys
//
// An event with IdempotencyKey is also checked against (tenant, operation,
// key) with a hash of its business content (RequestHash). The same key with
// the same hash is a DUPLICATE carrying the first request's stored result,
// with no effect; with a different hash it is a CONFLICT, rejected. Neither
// writes an inbox row: the row would claim an effect that never happened
// (inbox-without-effect), and a redelivery reaches the same decision again
// anyway. A key is claimed only together with an effect: a GAP, STALE or
// PARKED event does not burn its key.
//
// # Strategies
//
// The correct strategies (tx, cte, batch, pipeline) have identical
// semantics and differ in SQL and round trips; snapshots and keyed events
// take the shared transactional path in every one of them. The negative
// controls (broken-*) each reproduce one mistake from the article, are
// never a default, are never matched by a wildcard in Resolve, and are
// labelled "(broken: negative control)" by Label.
//
// User strategies come from SQL files (LoadStrategyFile, FileStrategy):
// a team's own inbox SQL with named parameters, run in the same schema
// after the built-in migration and judged by the same checker. Package
// strategyfile reads and checks a file; running it is this package's.
// They are not registered: a runner takes them beside the registry's
// names. The
// harness parks the events a file answers GAP and applies them again
// through the file (userpark.go); a file with a @batch section applies
// batches (userbatch.go). A file never falls back to a built-in path. The
// format and the contract are in examples/strategies/README.md.
//
// Capabilities are interfaces, not names: Batching (a runner hands such a
// strategy batches), Scoped (a strategy file says what it handles),
// ParkDrainer (a strategy drains parked events with its own SQL).
//
// # Layouts and retention
//
// Retention must cover every window in which an event can come again;
// ApplyRetention (Inbox.Prune) always takes an explicit bound. A schema gets one
// of two inbox layouts when it is created (MigrateLayout). The plain one
// is pruned by deleting old rows in small batches. The partitioned one is
// PARTITION BY RANGE (event_time) with primary key (consumer, source,
// event_id, event_time): the event's own time, which every copy of an
// event carries, keeps the copies in one partition, so dedup holds as long
// as producers keep the time. Retention drops whole partitions
// (DropPartitions) and records a horizon; an event older than it is
// refused with ErrBeyondRetention instead of applied a second time.
// Partitions are created ahead and on demand; there is no DEFAULT
// partition. Both layouts run the same statements.
//
// # Timeouts and retries
//
// lock_timeout and statement_timeout are set on every connection
// (ConfigurePool). A lock or statement timeout, deadlock, serialization
// failure or lost connection is retried with backoff up to
// Options.MaxAttempts; after that the event fails with an error matching
// ErrRetryable and nothing of it is committed. Describe says of any
// Outcome.Err whether it can heal (Failure.Retryable), with PostgreSQL's
// condition name and, for a strategy file, the statement that failed.
//
// # What the checker reads
//
// The inbox owns its tables, so it installs the audit trigger the checker
// relies on (InstallAudit: every change of an account's version or
// balance, logged by the harness rather than the strategy) and reads the
// snapshot the checker judges (ReadSnapshot: accounts, the consumer's
// inbox and parked keys, the audit log). Judging it is runner.Judge's,
// with no database.
package inbox
