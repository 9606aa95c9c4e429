// Package workload defines workload files (YAML), generates the same event
// stream from the same seed every time, applies the fault plan, and
// computes the oracle: the final state every aggregate must reach.
package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	WarmupRounds int `yaml:"warmup_rounds" json:"warmup_rounds,omitempty"`
	// WarmupRoundsFor, when set, makes the warm-up rounds go on while a
	// cell's rate still rises from one warm-up round to the next (each
	// cell at least two, or WarmupRounds), for at most this long; unset,
	// every cell runs WarmupRounds of them (its --warmup-rounds-for
	// overrides it).
	WarmupRoundsFor Duration `yaml:"warmup_rounds_for" json:"warmup_rounds_for,omitempty"`
	Amount          Amount   `yaml:"amount" json:"amount"`
	Skew            Skew     `yaml:"key_skew" json:"key_skew"`
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
	return s.External.Timeout.Or(time.Second)
}

// ExternalLeaseOrDefault is External.Lease, or its default.
func (s *Spec) ExternalLeaseOrDefault() time.Duration {
	return s.External.Lease.Or(5 * time.Second)
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
	// InstanceKills kills an instance of a service under test with kill -9
	// after this share of events (at seeded moments of the stream, a
	// seeded instance each time), and starts it again: a rate of crashes
	// from outside, for a service's cells only (the suite's own consumers
	// crash with CrashAfterCommit).
	InstanceKills float64 `yaml:"instance_kills" json:"instance_kills,omitempty"`
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
	return []string{"name", "seed", "aggregates", "events", "duration", "warmup", "measure", "warmup_max", "max_backlog", "rounds", "warmup_rounds", "warmup_rounds_for", "amount{distribution,min,max}",
		"key_skew{kind,s,hot_share}", "snapshot_ratio", "message_size", "publish_rate", "consumers", "shards",
		"strategy", "batch_size", "parking", "faults{duplicate_republish,crash_after_commit,instance_kills,consumer_restarts,out_of_order,concurrent_duplicates,storm_consumers,publisher_retry,idempotency_conflicts,external_timeout,crash_after_call,external_unavailable,failover[{kind,target,at,down,pause}]}",
		"inbox_prefill", "inbox_prefill_age", "inbox_prune_every", "inbox_prune_keep", "external{delay,timeout,lease}"}
}

// Steady reports whether cells run for a time, at steady state (Measure).
func (s *Spec) Steady() bool { return s.Measure > 0 }

// DefaultWarmupMax bounds a steady-state cell's warm-up when the workload
// says nothing: a freshly started JVM broker keeps getting faster for
// about a minute of load.
const DefaultWarmupMax = 90 * time.Second

// WarmupLimit is the longest a steady-state cell warms up.
func (s *Spec) WarmupLimit() time.Duration {
	return s.WarmupMax.Or(max(DefaultWarmupMax, s.Warmup.D()))
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
