package dbcalib

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/workload"
)

// Comparisons a calibration can make.
const (
	// ComparePGBench: a `bench run --brokers none` cell against pgbench
	// running the strategy's twin (goal: none ≥ 95% of pgbench).
	ComparePGBench = "pgbench"
	// ComparePGX: the same none cell against the twin's statements sent
	// by a bare pgx loop in this process (pgxloop.go): the harness's own
	// cost over its database driver (goal: none ≥ 95% of the loop).
	ComparePGX = "pgx"
	// CompareAudit: the same none cell with the audit log and without
	// (goal: audited ≥ 97% of unaudited).
	CompareAudit = "audit"
	// ComparePrefill: the none cell with the workload's inbox_prefill
	// against the same cell on an empty inbox (no goal: what a big inbox
	// costs).
	ComparePrefill = "prefill"
	// ComparePrune: the prefilled cell with the workload's retention
	// running beside it (inbox_prune_every) against without (no goal).
	ComparePrune = "prune"
)

// Comparisons lists every comparison, in the order a round runs them.
var Comparisons = []string{ComparePGBench, ComparePGX, CompareAudit, ComparePrefill, ComparePrune}

// Goals are the ratios each comparison must reach; the inbox-size
// comparisons are measurements with no goal.
var Goals = map[string]float64{ComparePGBench: 0.95, ComparePGX: 0.95, CompareAudit: 0.97, ComparePrefill: 0, ComparePrune: 0}

// Setting keys: how errors name the options (config.SettingError), each
// its field path in Options, so that a program can name the setting as
// its user gives it (cmd/bench maps them to its flags).
const (
	KeyStrategies = "dbcalib.strategies"
	KeyCompare    = "dbcalib.compare"
	KeyRounds     = "dbcalib.rounds"
	KeyMeasure    = "dbcalib.measure"
)

// Options of a calibration.
type Options struct {
	Cfg        config.Config
	Spec       *workload.Spec
	Strategies []string
	Compare    []string
	// Rounds repeats every measurement, interleaved: on a shared machine
	// only ratios measured side by side mean anything.
	Rounds int
	// Measure is the measured time of each pgbench run and none cell,
	// after the workload's warm-up (none cells are sized to last about
	// that long from a short pilot cell).
	Measure time.Duration
	// Audit is the audit of both sides of the pgbench comparison (off:
	// neither side has one; auto resolves as bench run does).
	Audit inbox.AuditMode
	// ABMode is the audit the audit comparison measures against none
	// (zero: auto, what bench run installs by default).
	ABMode inbox.AuditMode
	// InboxLayout is the layout of every none cell's inbox.
	InboxLayout inbox.Layout
	PGBench     string // the pgbench binary; FindPGBench when empty
	Progress    io.Writer
}

// Validate checks what a calibration needs before anything runs; its
// errors name the option or workload field.
func (o *Options) Validate() error {
	s := o.Spec
	switch {
	case s == nil:
		return errors.New("no workload")
	case o.Rounds < 1:
		return config.Invalid(KeyRounds, o.Rounds, "at least 1")
	case o.Measure < time.Second:
		return config.Invalid(KeyMeasure, o.Measure, "at least 1s")
	case len(o.Strategies) == 0:
		return config.Invalid(KeyStrategies, nil, "name at least one")
	case hasFaults(s.Faults) || s.SnapshotRatio != 0:
		return fmt.Errorf("workload %s has faults or snapshots: a calibration runs fresh increments only (the twins' stream); use workloads/calibrate.yaml or a workload without them", s.Name)
	case s.Skew.Kind != "uniform":
		return fmt.Errorf("workload %s: key_skew.kind %s: the twins spread events evenly over each consumer's aggregates; use uniform", s.Name, s.Skew.Kind)
	case s.Shards < s.Consumers:
		return fmt.Errorf("workload %s: shards %d < consumers %d: some consumers would sit idle while every pgbench client works; use shards >= consumers", s.Name, s.Shards, s.Consumers)
	case s.PublishRate != 0:
		return fmt.Errorf("workload %s: publish_rate %v: a calibration measures saturated throughput; set 0", s.Name, s.PublishRate)
	}
	for _, c := range o.Compare {
		if _, ok := Goals[c]; !ok {
			return config.Invalid(KeyCompare, c, "accepted values are %s", strings.Join(Comparisons, ", "))
		}
	}
	switch {
	case slices.Contains(o.Compare, ComparePrefill) && s.InboxPrefill == 0:
		return config.Invalid(KeyCompare, ComparePrefill, "workload %s sets no inbox_prefill: give a workload that does (e.g. workloads/inbox-10m.yaml)", s.Name)
	case slices.Contains(o.Compare, ComparePrune) && s.InboxPruneEvery == 0:
		return config.Invalid(KeyCompare, ComparePrune, "workload %s sets no inbox_prune_every: give a workload that does (e.g. workloads/inbox-10m.yaml)", s.Name)
	}
	for _, st := range o.Strategies {
		if _, err := inbox.Lookup(st); err != nil {
			return err
		}
		if slices.Contains(o.Compare, ComparePGBench) || slices.Contains(o.Compare, ComparePGX) {
			if err := o.shape(st).check(); err != nil {
				return &config.SettingError{Key: KeyStrategies, Value: st, Err: err}
			}
		}
	}
	return nil
}

func (o *Options) shape(strategy string) Shape {
	return Shape{Strategy: strategy, Schema: "ib_calibrate_twin_" + strategy, Consumer: "balance-twin",
		Aggregates: o.Spec.Aggregates, Clients: o.Spec.Consumers, BatchSize: o.Spec.BatchSize, Parking: o.Spec.ParkingOn()}
}

// hasFaults reports whether a fault plan sets any fault (the storm size
// alone is none).
func hasFaults(f workload.Faults) bool {
	failover := len(f.Failover) > 0
	f.Failover = nil
	return failover || !reflect.DeepEqual(f, workload.Faults{StormConsumers: f.StormConsumers})
}
