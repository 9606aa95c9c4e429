package workload

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Checking a workload file: the bounds a spec is held to, and Validate,
// which names the first field that breaks one.

// Bounds a workload file is checked against. Each keeps a run inside what
// the oracle, PostgreSQL and the brokers can hold; Validate names the bound
// a field breaks.
const (
	// MaxEvents: the oracle holds the stream in memory.
	MaxEvents = 50_000_000
	// MaxStormConsumers bounds the consumers one concurrent-duplicate storm
	// races: each is a database connection on top of the consumers' own,
	// and a cell must stay well inside PostgreSQL's default
	// max_connections (100) with the default 4 consumers.
	MaxStormConsumers = 32
	// MaxConsumerRestarts bounds the planned restarts (each one tears a
	// consumer down and subscribes again).
	MaxConsumerRestarts = 1000
	// MaxPublishTime bounds events / publish_rate, the open-loop schedule.
	MaxPublishTime = 365 * 24 * time.Hour
	// KafkaBatchLimit is the smallest default message limit of the three
	// brokers: franz-go produces record batches of at most 1000012 bytes
	// (its ProducerBatchMaxBytes default, below the Kafka broker's
	// message.max.bytes default of 1048588). RocketMQ's broker allows
	// 4 MiB (maxMessageSize) and RabbitMQ 128 MiB (max_message_size in
	// 3.x, 16 MiB in 4.x).
	KafkaBatchLimit = 1_000_012
	// RecordHeadroom is what a record adds to the envelope in a Kafka
	// batch: the batch and record framing, the key and the event-id header
	// (a few hundred bytes; generous on purpose).
	RecordHeadroom = 4096
	// MaxMessageSize is the largest message_size accepted. Encode pads an
	// envelope to exactly message_size bytes (or leaves a larger natural
	// envelope as it is), so this is the body the brokers see.
	MaxMessageSize = KafkaBatchLimit - RecordHeadroom
)

// Validate names the first bad field and the values it accepts.
func (s *Spec) Validate() error {
	for _, check := range []func() error{s.validateFloats, s.validateSizes, s.validateAmount, s.validateKinds, s.validateFaults} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// floatField is one float a workload file sets, by its YAML name.
type floatField struct {
	name  string
	v     float64
	ratio bool // a fraction from 0 to 1
}

func (s *Spec) floatFields() []floatField {
	f := s.Faults
	return []floatField{{"snapshot_ratio", s.SnapshotRatio, true}, {"publish_rate", s.PublishRate, false},
		{"key_skew.s", s.Skew.S, false}, {"key_skew.hot_share", s.Skew.HotShare, false},
		{"faults.duplicate_republish", f.DuplicateRepublish, true}, {"faults.crash_after_commit", f.CrashAfterCommit, true},
		{"faults.out_of_order", f.OutOfOrder, true}, {"faults.concurrent_duplicates", f.ConcurrentDuplicates, true},
		{"faults.publisher_retry", f.PublisherRetry, true}, {"faults.idempotency_conflicts", f.IdempotencyConflicts, true},
		{"faults.external_timeout", f.ExternalTimeout, true}, {"faults.crash_after_call", f.CrashAfterCall, true},
		{"faults.instance_kills", f.InstanceKills, true}}
}

// validateFloats rejects NaN and infinities everywhere (a NaN compares
// false with every bound, so it would pass the range checks; zipf with
// s: .nan never finishes spreading the events), then checks the ratios
// and the publish rate.
func (s *Spec) validateFloats() error {
	for _, f := range s.floatFields() {
		switch {
		case math.IsNaN(f.v) || math.IsInf(f.v, 0):
			return fmt.Errorf("%s: %v: not a finite number", f.name, f.v)
		case f.ratio && (f.v < 0 || f.v > 1):
			return fmt.Errorf("%s: %v is not a ratio: use a number from 0 to 1", f.name, f.v)
		}
	}
	if s.PublishRate < 0 {
		return fmt.Errorf("publish_rate: %v: use 0 (as fast as confirmed) or a positive rate in events/s", s.PublishRate)
	}
	if least := float64(s.Events) / MaxPublishTime.Seconds(); s.PublishRate > 0 && s.PublishRate < least {
		return fmt.Errorf("publish_rate: %v events/s would take more than %s to publish %d events: use at least %.6g, or 0 (as fast as confirmed)", s.PublishRate, MaxPublishTime, s.Events, least)
	}
	return nil
}

// validateSizes checks the counts and sizes of the stream and the run.
func (s *Spec) validateSizes() error {
	switch {
	case s.Aggregates < 1:
		return fmt.Errorf("aggregates: %d: need at least 1", s.Aggregates)
	case s.Events < s.Aggregates:
		return fmt.Errorf("events: %d is fewer than aggregates (%d): every aggregate gets at least one event", s.Events, s.Aggregates)
	case s.Events > MaxEvents:
		return fmt.Errorf("events: %d: at most %d (the oracle holds the stream in memory)", s.Events, MaxEvents)
	case s.Duration < 0 || s.Warmup < 0:
		return fmt.Errorf("duration/warmup must not be negative")
	case s.Measure < 0 || (s.Measure > 0 && s.Measure.D() < time.Second):
		return fmt.Errorf("measure: %s: use at least 1s, or leave it out (the cell then runs for its events)", s.Measure.D())
	case s.Measure > 0 && s.Faults.ConsumerRestarts > 0:
		return fmt.Errorf("measure with faults.consumer_restarts: restarts are spread over a stream's events, and a steady-state cell has no count of them; remove one")
	case s.Measure > 0 && s.Duration > 0:
		return fmt.Errorf("measure with duration: a steady-state cell runs for its warm-up and measure; remove duration")
	case s.WarmupMax != 0 && (s.Measure == 0 || s.WarmupMax < s.Warmup):
		return fmt.Errorf("warmup_max: %s: it bounds a steady-state cell's warm-up (with measure), and must be at least warmup (%s)", s.WarmupMax.D(), s.Warmup.D())
	case s.MaxBacklog < 0:
		return fmt.Errorf("max_backlog: %d: use 0 (8 batches per shard) or more", s.MaxBacklog)
	case s.Rounds < 0 || s.Rounds > 100:
		return fmt.Errorf("rounds: %d: use 1 to 100", s.Rounds)
	case s.WarmupRounds < 0 || s.WarmupRounds > 10:
		return fmt.Errorf("warmup_rounds: %d: use 0 to 10", s.WarmupRounds)
	case s.WarmupRoundsFor < 0 || s.WarmupRoundsFor.D() > time.Hour:
		return fmt.Errorf("warmup_rounds_for: %s: use 0 (a fixed count of warm-up rounds) to 1h", s.WarmupRoundsFor.D())
	case s.MessageSize < 0:
		return fmt.Errorf("message_size: %d: must not be negative (0 sends the envelope unpadded)", s.MessageSize)
	case s.MessageSize > MaxMessageSize:
		return fmt.Errorf("message_size: %d: at most %d bytes: Kafka's default limit is %d bytes per record batch (franz-go's ProducerBatchMaxBytes; the broker's message.max.bytes is 1048588) and the key, headers and framing need up to %d more; RocketMQ (4 MiB) and RabbitMQ (16 MiB or more) allow more", s.MessageSize, MaxMessageSize, KafkaBatchLimit, RecordHeadroom)
	case s.Publishers < 1 || s.Publishers > 64:
		return fmt.Errorf("publishers: %d: use 1 to 64", s.Publishers)
	case s.Consumers < 1 || s.Consumers > 256:
		return fmt.Errorf("consumers: %d: use 1 to 256", s.Consumers)
	case s.Shards < 1 || s.Shards > 1024:
		return fmt.Errorf("shards: %d: use 1 to 1024", s.Shards)
	case s.BatchSize < 1 || s.BatchSize > 10000:
		return fmt.Errorf("batch_size: %d: use 1 to 10000", s.BatchSize)
	}
	return nil
}

// validateAmount keeps the oracle's per-aggregate sum inside int64: one
// aggregate can receive every event, so the largest amount times events
// must fit. The real limit is PostgreSQL's: account.balance is a bigint
// (inbox/migrations/0001_init.sql), the same 64 bits.
func (s *Spec) validateAmount() error {
	a := s.Amount
	switch {
	case a.Distribution != "uniform" && a.Distribution != "constant":
		return fmt.Errorf("amount.distribution: %q: accepted values are uniform, constant", a.Distribution)
	case a.Min < 1 || (a.Distribution == "uniform" && a.Max < a.Min):
		return fmt.Errorf("amount: min %d, max %d: need 1 <= min <= max", a.Min, a.Max)
	}
	largest, field := a.Max, "amount.max"
	if a.Distribution == "constant" {
		largest, field = a.Min, "amount.min"
	}
	// events+1: an idempotency-conflict request carries its original's
	// amount plus one.
	if limit := math.MaxInt64 / (int64(max(s.Events, 0)) + 1); largest > limit {
		return fmt.Errorf("%s: %d: at most %d with %d events: one aggregate may receive every event, and its balance must fit a bigint (account.balance in inbox/migrations/0001_init.sql, at most %d)", field, largest, limit, s.Events, int64(math.MaxInt64))
	}
	return nil
}

// validateKinds checks the named choices and their parameters.
func (s *Spec) validateKinds() error {
	switch {
	case s.Skew.Kind != "uniform" && s.Skew.Kind != "zipf" && s.Skew.Kind != "hot":
		return fmt.Errorf("key_skew.kind: %q: accepted values are uniform, zipf, hot", s.Skew.Kind)
	case s.Skew.Kind == "zipf" && s.Skew.S <= 0:
		return fmt.Errorf("key_skew.s: %v: zipf needs an exponent > 0 (1.1 is typical)", s.Skew.S)
	case s.Skew.Kind == "hot" && (s.Skew.HotShare <= 0 || s.Skew.HotShare >= 1):
		return fmt.Errorf("key_skew.hot_share: %v: hot needs a share between 0 and 1 (exclusive)", s.Skew.HotShare)
	case s.Strategy == "":
		return fmt.Errorf("strategy: empty: name an inbox strategy such as tx, cte, batch, pipeline")
	}
	return nil
}

// validateFaults checks the fault plan's counts and combinations.
func (s *Spec) validateFaults() error {
	f := s.Faults
	switch {
	case f.StormConsumers < 2 && f.ConcurrentDuplicates > 0:
		return fmt.Errorf("faults.storm_consumers: %d: a concurrent-duplicate storm needs at least 2 consumers", f.StormConsumers)
	case f.StormConsumers < 0 || f.StormConsumers > MaxStormConsumers:
		return fmt.Errorf("faults.storm_consumers: %d: use 2 to %d (each is a database connection on top of the consumers'; PostgreSQL allows 100 by default)", f.StormConsumers, MaxStormConsumers)
	case f.ConsumerRestarts < 0 || f.ConsumerRestarts > MaxConsumerRestarts:
		return fmt.Errorf("faults.consumer_restarts: %d: use 0 to %d", f.ConsumerRestarts, MaxConsumerRestarts)
	case f.IdempotencyConflicts > 0 && f.OutOfOrder > 0:
		return fmt.Errorf("faults.idempotency_conflicts with faults.out_of_order: a reordered original could meet its conflicting request first; use one or the other")
	case f.OutOfOrder > 0 && !s.ParkingOn():
		return fmt.Errorf("faults.out_of_order: %v with parking off: gaps would be rejected and retried by redelivery; turn parking on or set out_of_order to 0", f.OutOfOrder)
	}
	if err := s.validateExternal(); err != nil {
		return err
	}
	if err := s.validateFailover(); err != nil {
		return err
	}
	return s.validateInbox()
}

// validateExternal checks the external service's settings and faults.
func (s *Spec) validateExternal() error {
	x, f := s.External, s.Faults
	switch {
	case x.Delay < 0 || x.Delay.D() > MaxExternalDelay:
		return fmt.Errorf("external.delay: %s: use 0 to %s", x.Delay.D(), MaxExternalDelay)
	case x.Timeout < 0 || (x.Timeout > 0 && x.Timeout.D() < 10*time.Millisecond) || x.Timeout.D() > MaxExternalTimeout:
		return fmt.Errorf("external.timeout: %s: use 10ms to %s, or leave it out (1s)", x.Timeout.D(), MaxExternalTimeout)
	case x.Delay > 0 && x.Delay.D() >= s.ExternalTimeoutOrDefault():
		return fmt.Errorf("external.delay: %s is not below external.timeout (%s): every call would time out", x.Delay.D(), s.ExternalTimeoutOrDefault())
	case x.Lease < 0 || (x.Lease > 0 && x.Lease.D() <= s.ExternalTimeoutOrDefault()) || x.Lease.D() > time.Hour:
		return fmt.Errorf("external.lease: %s: use more than external.timeout (%s), at most 1h, or leave it out (5s): a lease shorter than a call lets a second delivery take over a call still in flight", x.Lease.D(), s.ExternalTimeoutOrDefault())
	case f.ExternalUnavailable < 0 || f.ExternalUnavailable.D() > 10*time.Minute:
		return fmt.Errorf("faults.external_unavailable: %s: use 0 to 10m", f.ExternalUnavailable.D())
	}
	return nil
}

// validateInbox checks the prefill and the retention run during a cell.
func (s *Spec) validateInbox() error {
	day := 24 * time.Hour
	switch age, every, keep := s.InboxPrefillAge.D(), s.InboxPruneEvery.D(), s.InboxPruneKeep.D(); {
	case s.InboxPrefill < 0 || s.InboxPrefill > MaxInboxPrefill:
		return fmt.Errorf("inbox_prefill: %d: use 0 (an empty inbox) to %d rows", s.InboxPrefill, MaxInboxPrefill)
	case s.InboxPrefill > 0 && age <= 0:
		return fmt.Errorf("inbox_prefill: %d rows need inbox_prefill_age, the history they span (e.g. 30d)", s.InboxPrefill)
	case s.InboxPrefill == 0 && age != 0:
		return fmt.Errorf("inbox_prefill_age: %s without inbox_prefill: set how many rows to load, or remove it", age)
	case age < 0 || age > 3650*day:
		return fmt.Errorf("inbox_prefill_age: %s: use 1s to 3650d", age)
	case every < 0 || every > day || (every > 0 && every < time.Second):
		return fmt.Errorf("inbox_prune_every: %s: use 1s to 24h, or 0 (no retention during the cell)", every)
	case every > 0 && keep == 0:
		return errors.New("inbox_prune_every needs inbox_prune_keep: the history retention keeps (e.g. 7d)")
	case every == 0 && keep != 0:
		return fmt.Errorf("inbox_prune_keep: %s without inbox_prune_every: set how often retention runs, or remove it", keep)
	case keep != 0 && (keep < time.Hour || keep > 3650*day):
		return fmt.Errorf("inbox_prune_keep: %s: use 1h to 3650d: a shorter retention would forget this run's own events while they can still be redelivered", keep)
	}
	return nil
}
