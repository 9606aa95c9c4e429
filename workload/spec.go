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
	// Warmup is excluded from latency and throughput figures.
	Warmup Duration `yaml:"warmup" json:"warmup"`
	Amount Amount   `yaml:"amount" json:"amount"`
	Skew   Skew     `yaml:"key_skew" json:"key_skew"`
	// SnapshotRatio is the share of events that are snapshots (full state,
	// keep-latest); the rest are increments.
	SnapshotRatio float64 `yaml:"snapshot_ratio" json:"snapshot_ratio"`
	// MessageSize pads each envelope to about this many bytes.
	MessageSize int `yaml:"message_size" json:"message_size"`
	// PublishRate in events/s, open loop; 0 publishes as fast as the broker
	// confirms.
	PublishRate float64 `yaml:"publish_rate" json:"publish_rate"`
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
	// Strategy is the default inbox strategy when --strategies is not given.
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
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%v (fields: %s)", cleanYAMLError(err), strings.Join(fieldNames(), ", "))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func cleanYAMLError(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")
}

func fieldNames() []string {
	return []string{"name", "seed", "aggregates", "events", "duration", "warmup", "amount{distribution,min,max}",
		"key_skew{kind,s,hot_share}", "snapshot_ratio", "message_size", "publish_rate", "consumers", "shards",
		"strategy", "batch_size", "parking", "faults{duplicate_republish,crash_after_commit,consumer_restarts,out_of_order,concurrent_duplicates,storm_consumers,publisher_retry,idempotency_conflicts}",
		"inbox_prefill", "inbox_prefill_age", "inbox_prune_every", "inbox_prune_keep"}
}

// Validate names the first bad field and the values it accepts.
func (s *Spec) Validate() error {
	ratio := func(name string, v float64) error {
		if v < 0 || v > 1 {
			return fmt.Errorf("%s: %v is not a ratio: use a number from 0 to 1", name, v)
		}
		return nil
	}
	switch {
	case s.Aggregates < 1:
		return fmt.Errorf("aggregates: %d: need at least 1", s.Aggregates)
	case s.Events < s.Aggregates:
		return fmt.Errorf("events: %d is fewer than aggregates (%d): every aggregate gets at least one event", s.Events, s.Aggregates)
	case s.Events > 50_000_000:
		return fmt.Errorf("events: %d: at most 50000000 (the oracle holds the stream in memory)", s.Events)
	case s.Duration < 0 || s.Warmup < 0:
		return fmt.Errorf("duration/warmup must not be negative")
	case s.Amount.Distribution != "uniform" && s.Amount.Distribution != "constant":
		return fmt.Errorf("amount.distribution: %q: accepted values are uniform, constant", s.Amount.Distribution)
	case s.Amount.Min < 1 || (s.Amount.Distribution == "uniform" && s.Amount.Max < s.Amount.Min):
		return fmt.Errorf("amount: min %d, max %d: need 1 <= min <= max", s.Amount.Min, s.Amount.Max)
	case s.Skew.Kind != "uniform" && s.Skew.Kind != "zipf" && s.Skew.Kind != "hot":
		return fmt.Errorf("key_skew.kind: %q: accepted values are uniform, zipf, hot", s.Skew.Kind)
	case s.Skew.Kind == "zipf" && s.Skew.S <= 0:
		return fmt.Errorf("key_skew.s: %v: zipf needs an exponent > 0 (1.1 is typical)", s.Skew.S)
	case s.Skew.Kind == "hot" && (s.Skew.HotShare <= 0 || s.Skew.HotShare >= 1):
		return fmt.Errorf("key_skew.hot_share: %v: hot needs a share between 0 and 1 (exclusive)", s.Skew.HotShare)
	case s.MessageSize < 0 || s.MessageSize > 4<<20:
		return fmt.Errorf("message_size: %d: use 0 to 4194304 bytes", s.MessageSize)
	case s.PublishRate < 0:
		return fmt.Errorf("publish_rate: %v: use 0 (as fast as confirmed) or a positive rate in events/s", s.PublishRate)
	case s.Publishers < 1 || s.Publishers > 64:
		return fmt.Errorf("publishers: %d: use 1 to 64", s.Publishers)
	case s.Consumers < 1 || s.Consumers > 256:
		return fmt.Errorf("consumers: %d: use 1 to 256", s.Consumers)
	case s.Shards < 1 || s.Shards > 1024:
		return fmt.Errorf("shards: %d: use 1 to 1024", s.Shards)
	case s.BatchSize < 1 || s.BatchSize > 10000:
		return fmt.Errorf("batch_size: %d: use 1 to 10000", s.BatchSize)
	case s.Strategy == "":
		return fmt.Errorf("strategy: empty: name an inbox strategy such as tx, cte, batch, pipeline")
	case s.Faults.StormConsumers < 2 && s.Faults.ConcurrentDuplicates > 0:
		return fmt.Errorf("faults.storm_consumers: %d: a concurrent-duplicate storm needs at least 2 consumers", s.Faults.StormConsumers)
	case s.Faults.ConsumerRestarts < 0:
		return fmt.Errorf("faults.consumer_restarts: %d must not be negative", s.Faults.ConsumerRestarts)
	}
	for _, r := range []struct {
		n string
		v float64
	}{{"snapshot_ratio", s.SnapshotRatio}, {"faults.duplicate_republish", s.Faults.DuplicateRepublish},
		{"faults.crash_after_commit", s.Faults.CrashAfterCommit}, {"faults.out_of_order", s.Faults.OutOfOrder},
		{"faults.concurrent_duplicates", s.Faults.ConcurrentDuplicates}, {"faults.publisher_retry", s.Faults.PublisherRetry},
		{"faults.idempotency_conflicts", s.Faults.IdempotencyConflicts}} {
		if err := ratio(r.n, r.v); err != nil {
			return err
		}
	}
	if s.Faults.IdempotencyConflicts > 0 && s.Faults.OutOfOrder > 0 {
		return fmt.Errorf("faults.idempotency_conflicts with faults.out_of_order: a reordered original could meet its conflicting request first; use one or the other")
	}
	if s.Faults.OutOfOrder > 0 && !s.ParkingOn() {
		return fmt.Errorf("faults.out_of_order: %v with parking off: gaps would be rejected and retried by redelivery; turn parking on or set out_of_order to 0", s.Faults.OutOfOrder)
	}
	return s.validateInbox()
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

// ParkingOn reports whether version-ahead events are parked.
func (s *Spec) ParkingOn() bool { return s.Parking == nil || *s.Parking }
