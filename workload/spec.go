// Package workload defines workload files (YAML), generates the same event
// stream from the same seed every time, applies the fault plan, and
// computes the oracle: the final state every aggregate must reach.
package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Spec is a workload file. Every field has a default (see Defaults); a file
// sets only what it changes. Unknown fields are rejected.
type Spec struct {
	Name string `yaml:"name" json:"name"`
	// Seed makes the stream, the amounts, the key order and every fault
	// decision reproducible.
	Seed int64 `yaml:"seed" json:"seed"`
	// Aggregates is the number of distinct aggregates (accounts, orders).
	Aggregates int `yaml:"aggregates" json:"aggregates"`
	// Events is the number of distinct business events; they are spread
	// over the aggregates according to KeySkew. Duration, when set, caps
	// the publishing time instead (events then is an upper bound).
	Events   int      `yaml:"events" json:"events"`
	Duration Duration `yaml:"duration" json:"duration"`
	// Warmup is excluded from latency and throughput figures. With
	// Measure it is the shortest warm-up: the cell then warms up until its
	// rate has settled, for at most WarmupMax.
	Warmup Duration `yaml:"warmup" json:"warmup"`
	// Measure makes every measured cell a steady-state one: it runs for a
	// time instead of for Events (the stream goes on, chunk after chunk
	// of Events events continuing the same aggregates, see Stream), warms
	// up until its rate settles, and then measures for this long.
	Measure   Duration `yaml:"measure" json:"measure,omitempty"`
	WarmupMax Duration `yaml:"warmup_max" json:"warmup_max,omitempty"`
	// MaxBacklog bounds, in a steady-state cell published as fast as the
	// broker confirms, the messages sent but not yet answered by the
	// consumers: the publisher waits above it, so the cell measures the
	// slower of publishing and consuming at a constant backlog instead of
	// a backlog that grows for as long as the cell runs. 0: 8 batches per
	// shard.
	MaxBacklog int `yaml:"max_backlog" json:"max_backlog,omitempty"`
	// Rounds is how often `bench run` measures every cell, interleaved
	// (its --rounds overrides it).
	Rounds int `yaml:"rounds" json:"rounds,omitempty"`
	// WarmupRounds are rounds run before the measured ones and not kept
	// (unless a cell fails its checks there): a freshly started JVM
	// broker keeps getting faster for minutes, longer than a cell's own
	// warm-up (its --warmup-rounds overrides it).
	WarmupRounds int    `yaml:"warmup_rounds" json:"warmup_rounds,omitempty"`
	Amount       Amount `yaml:"amount" json:"amount"`
	Skew         Skew   `yaml:"key_skew" json:"key_skew"`
	// SnapshotRatio is the share of events that are snapshots (full state,
	// keep-latest); the rest are increments.
	SnapshotRatio float64 `yaml:"snapshot_ratio" json:"snapshot_ratio"`
	// MessageSize pads each envelope to about this many bytes.
	MessageSize int `yaml:"message_size" json:"message_size"`
	// PublishRate in events/s, open loop; 0 publishes as fast as the broker
	// confirms. In a file, "max" asks for the maximum sustainable rate
	// instead (FindMaxRate, as bench run --find-max-rate).
	PublishRate float64 `yaml:"publish_rate" json:"publish_rate"`
	// FindMaxRate is set by publish_rate: max.
	FindMaxRate bool `yaml:"-" json:"find_max_rate,omitempty"`
	// Publishers is the number of concurrent publishers. Each owns the
	// keys that hash to it and sends them in plan order, so per-key order
	// is the plan's while the broker sees several batches in flight: one
	// publisher waiting for each batch's confirms measures its round trip,
	// not the broker's throughput.
	Publishers int `yaml:"publishers" json:"publishers"`
	// Consumers is the number of concurrent consumers (each with its own
	// database connection).
	Consumers int `yaml:"consumers" json:"consumers"`
	// Shards is the partition / queue count (per-key order holds per shard).
	Shards int `yaml:"shards" json:"shards"`
	// Strategy is the default inbox strategy, or a comma-separated list of
	// them as --strategies takes, when --strategies is not given.
	Strategy  string `yaml:"strategy" json:"strategy"`
	BatchSize int    `yaml:"batch_size" json:"batch_size"`
	// Parking holds version-ahead events until their predecessor commits.
	Parking *bool  `yaml:"parking" json:"parking"`
	Faults  Faults `yaml:"faults" json:"faults"`
	// InboxPrefill loads this many old rows into each cell's inbox before
	// the run, outside its figures, so a strategy is judged at the size
	// its inbox will have in production; InboxPrefillAge is how much
	// history they span (see inbox.Prefill).
	InboxPrefill    int      `yaml:"inbox_prefill" json:"inbox_prefill,omitempty"`
	InboxPrefillAge Duration `yaml:"inbox_prefill_age" json:"inbox_prefill_age,omitempty"`
	// InboxPruneEvery runs the inbox's retention during the cell, every
	// period, keeping the newest InboxPruneKeep of the history: what
	// cleaning up costs the stream it runs beside.
	InboxPruneEvery Duration `yaml:"inbox_prune_every" json:"inbox_prune_every,omitempty"`
	InboxPruneKeep  Duration `yaml:"inbox_prune_keep" json:"inbox_prune_keep,omitempty"`
	// External is the external service that the external strategies
	// call (ext-*: a payment per applied increment), and how they call it.
	External External `yaml:"external" json:"external,omitzero"`
}

// External sets the external service and its callers.
type External struct {
	// Delay is the service's time per call, spent before it answers:
	// what a slow provider does to throughput and lock waits.
	Delay Duration `yaml:"delay" json:"delay,omitempty"`
	// Timeout is how long a caller waits for an answer before it gives
	// up, not knowing whether the call was applied (default 1s).
	Timeout Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Lease is how long ext-lease's PROCESSING claim keeps other
	// deliveries away (default 5s).
	Lease Duration `yaml:"lease" json:"lease,omitempty"`
}

// Bounds of the external settings.
const (
	MaxExternalDelay   = 10 * time.Second
	MaxExternalTimeout = time.Minute
)

// ExternalTimeoutOrDefault is External.Timeout, or its default.
func (s *Spec) ExternalTimeoutOrDefault() time.Duration {
	if s.External.Timeout > 0 {
		return s.External.Timeout.D()
	}
	return time.Second
}

// ExternalLeaseOrDefault is External.Lease, or its default.
func (s *Spec) ExternalLeaseOrDefault() time.Duration {
	if s.External.Lease > 0 {
		return s.External.Lease.D()
	}
	return 5 * time.Second
}

// MaxInboxPrefill bounds inbox_prefill: about 20 GB of inbox per cell.
const MaxInboxPrefill = 100_000_000

// Amount is the distribution of increment amounts.
type Amount struct {
	// Distribution is "uniform" (Min..Max) or "constant" (Min).
	Distribution string `yaml:"distribution" json:"distribution"`
	Min          int64  `yaml:"min" json:"min"`
	Max          int64  `yaml:"max" json:"max"`
}

// Skew is how events are spread over aggregates.
type Skew struct {
	// Kind is "uniform", "zipf" (weight 1/rank^S) or "hot" (one aggregate
	// gets HotShare of all events).
	Kind     string  `yaml:"kind" json:"kind"`
	S        float64 `yaml:"s" json:"s,omitempty"`
	HotShare float64 `yaml:"hot_share" json:"hot_share,omitempty"`
}

// Faults is the fault plan. Ratios are fractions of events (0..1).
type Faults struct {
	// DuplicateRepublish re-sends an event later as a new transport message
	// with the same event id (upstream republish).
	DuplicateRepublish float64 `yaml:"duplicate_republish" json:"duplicate_republish"`
	// CrashAfterCommit makes the consumer commit, then drop the delivery
	// without ack and tear down its connection (the article's duplicate
	// experiment), on the event's first delivery.
	CrashAfterCommit float64 `yaml:"crash_after_commit" json:"crash_after_commit"`
	// ConsumerRestarts restarts consumers this many times, evenly spread
	// over the run.
	ConsumerRestarts int `yaml:"consumer_restarts" json:"consumer_restarts"`
	// OutOfOrder publishes an event's successor before it (a version gap
	// the inbox must park or reject, never skip).
	OutOfOrder float64 `yaml:"out_of_order" json:"out_of_order"`
	// ConcurrentDuplicates delivers an event to StormConsumers consumers at
	// once (they race on the inbox primary key).
	ConcurrentDuplicates float64 `yaml:"concurrent_duplicates" json:"concurrent_duplicates"`
	StormConsumers       int     `yaml:"storm_consumers" json:"storm_consumers"`
	// PublisherRetry re-sends an event right after itself (a producer that
	// timed out waiting for its confirm and sent again).
	PublisherRetry float64 `yaml:"publisher_retry" json:"publisher_retry"`
	// IdempotencyConflicts gives events a client idempotency key and, right
	// after each, sends a replay of the same request under a new event id
	// (must not take effect again) and a different request reusing the key
	// (must be rejected as CONFLICT).
	IdempotencyConflicts float64 `yaml:"idempotency_conflicts" json:"idempotency_conflicts"`
	// The external service's faults (for strategies that call it).
	// ExternalTimeout: the service applies the external call of this
	// share of events and holds its answer until the caller gives up, so
	// the call times out after it was applied (once per event).
	ExternalTimeout float64 `yaml:"external_timeout" json:"external_timeout,omitempty"`
	// CrashAfterCall: the handler dies between this share of events'
	// external call and the database commit that records it (once per
	// event; in a worker process a real kill -9). The crash between the
	// commit and the ack is CrashAfterCommit.
	CrashAfterCall float64 `yaml:"crash_after_call" json:"crash_after_call,omitempty"`
	// ExternalUnavailable: the service refuses every call for this long,
	// once, when a third of the stream has been answered.
	ExternalUnavailable Duration `yaml:"external_unavailable" json:"external_unavailable,omitempty"`
	// Failover hits nodes of a replicated cluster mid-stream
	// (failover.go).
	Failover []FailoverFault `yaml:"failover,omitempty" json:"failover,omitempty"`
}

// Duration is a time.Duration written as "30s", "2m" in YAML and JSON.
type Duration time.Duration

func (d Duration) D() time.Duration { return time.Duration(d) }

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration: write e.g. 30s, 2m, 1m30s or 30d", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	*d = Duration(v)
	return err
}

// parseDuration is time.ParseDuration that also takes whole days ("30d"),
// the unit retention is spoken in.
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100_000 {
			return 0, fmt.Errorf("%q: write whole days such as 30d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// Defaults is the spec a workload file starts from.
func Defaults() Spec {
	parking := true
	return Spec{
		Name: "unnamed", Seed: 1, Aggregates: 100, Events: 10000,
		Amount:      Amount{Distribution: "uniform", Min: 1, Max: 100},
		Skew:        Skew{Kind: "uniform"},
		MessageSize: 512, Consumers: 4, Shards: 8, Publishers: 4,
		Strategy: "tx", BatchSize: 100, Parking: &parking,
		Faults: Faults{StormConsumers: 3},
	}
}

// Load reads and validates a workload file. A bare name (no slash, no
// extension) is looked up as workloads/NAME.yaml.
func Load(path string) (*Spec, error) {
	if !strings.ContainsAny(path, "/\\") && filepath.Ext(path) == "" {
		path = filepath.Join("workloads", path+".yaml")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			var names []string
			if m, _ := filepath.Glob(filepath.Join("workloads", "*.yaml")); len(m) > 0 {
				for _, f := range m {
					names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
				}
				return nil, fmt.Errorf("workload %s does not exist: give a file path, or one of %s", path, strings.Join(names, ", "))
			}
		}
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	if s.Name == "unnamed" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// Parse decodes a workload over the defaults, rejecting unknown fields.
func Parse(b []byte) (*Spec, error) {
	s := Defaults()
	b, s.FindMaxRate = rateMax(b)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%v (fields: %s)", cleanYAMLError(err), strings.Join(fieldNames(), ", "))
	}
	if len(s.Faults.Failover) == 0 {
		// A list of nothing but empty entries ("failover:\n  -") decodes
		// to an empty list: the same spec as none, written back without it.
		s.Faults.Failover = nil
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// rateMax finds publish_rate: max at the top of a document and writes 0
// in its place (same line and column, so the decoder's messages still
// point at the file's lines); found says it was there.
func rateMax(b []byte) (out []byte, found bool) {
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return b, false
	}
	m := doc.Content[0].Content
	for i := 0; i+1 < len(m); i += 2 {
		v := m[i+1]
		if m[i].Value != "publish_rate" || v.Kind != yaml.ScalarNode || v.Value != "max" || v.Style != 0 {
			continue
		}
		lines := bytes.SplitAfter(b, []byte("\n"))
		if v.Line < 1 || v.Line > len(lines) {
			return b, false
		}
		line := lines[v.Line-1]
		at := bytes.Index(line[min(v.Column-1, len(line)):], []byte("max"))
		if at < 0 {
			return b, false
		}
		at += min(v.Column-1, len(line))
		fixed := append(append(append([]byte(nil), line[:at]...), "0  "...), line[at+3:]...)
		lines[v.Line-1] = fixed
		return bytes.Join(lines, nil), true
	}
	return b, false
}

func cleanYAMLError(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")
}

func fieldNames() []string {
	return []string{"name", "seed", "aggregates", "events", "duration", "warmup", "measure", "warmup_max", "max_backlog", "rounds", "amount{distribution,min,max}",
		"key_skew{kind,s,hot_share}", "snapshot_ratio", "message_size", "publish_rate", "consumers", "shards",
		"strategy", "batch_size", "parking", "faults{duplicate_republish,crash_after_commit,consumer_restarts,out_of_order,concurrent_duplicates,storm_consumers,publisher_retry,idempotency_conflicts,external_timeout,crash_after_call,external_unavailable,failover[{kind,target,at,down,pause}]}",
		"inbox_prefill", "inbox_prefill_age", "inbox_prune_every", "inbox_prune_keep", "external{delay,timeout,lease}"}
}

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
		{"faults.external_timeout", f.ExternalTimeout, true}, {"faults.crash_after_call", f.CrashAfterCall, true}}
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

// Steady reports whether cells run for a time, at steady state (Measure).
func (s *Spec) Steady() bool { return s.Measure > 0 }

// DefaultWarmupMax bounds a steady-state cell's warm-up when the workload
// says nothing: a freshly started JVM broker keeps getting faster for
// about a minute of load.
const DefaultWarmupMax = 90 * time.Second

// WarmupLimit is the longest a steady-state cell warms up.
func (s *Spec) WarmupLimit() time.Duration {
	if s.WarmupMax > 0 {
		return s.WarmupMax.D()
	}
	return max(DefaultWarmupMax, s.Warmup.D())
}

// Backlog is MaxBacklog, or its default.
func (s *Spec) Backlog() int {
	if s.MaxBacklog > 0 {
		return s.MaxBacklog
	}
	return 8 * s.Shards * max(s.BatchSize, 64)
}

// ParkingOn reports whether version-ahead events are parked.
func (s *Spec) ParkingOn() bool { return s.Parking == nil || *s.Parking }
