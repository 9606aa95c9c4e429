// Package calibrate measures each broker's Go driver against the broker
// vendor's own perf tool on the same shape, one right after the other on
// the same machine: Kafka's ProducerPerformance and ConsumerPerformance
// (kafka-tools), RabbitMQ's PerfTest, RocketMQ's benchmark BatchProducer,
// Producer and Consumer (rocketmq-example). The tools come from Maven
// Central the way the local stack fetches the brokers
// (compose.FetchJavaTool, cached under <stack>/calibrate/<broker>); the
// driver side is brokers/brokerbench.
//
// For throughput it measures each broker, in this order: the vendor
// producer into a fresh topic, the vendor consumer draining it (and a
// second vendor publish row where the vendor has one: RocketMQ's
// single-send Producer beside BatchProducer), the driver publishing into
// another fresh topic, the driver draining that; with several rounds the
// driver goes first in every second one. Both topics are created by the
// driver's Setup, so shards, queue type and durability are the same.
// Publish figures leave the first Warmup out (JVM JIT and client
// start-up); consume figures are drains of a preloaded topic without the
// consumer's start-up. The driver/vendor ratios say how much of the
// broker's speed the Go client reaches; over rounds each comes with the
// confidence interval of its median (results.EstimateOf).
//
// With Rates it measures latency instead (rate.go): each side publishes
// at each rate with a consumer reading live, and reports send → confirm
// and publish → consumer percentiles.
package calibrate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// Setting keys: how errors name the options (config.SettingError), each
// its field path in Options, so that a program can name the setting as
// its user gives it (cmd/bench maps them to its flags).
const (
	KeyBrokers     = "calibrate.brokers"
	KeyMessageSize = "calibrate.shape.message-size"
	KeyShards      = "calibrate.shape.shards"
	KeyProducers   = "calibrate.shape.producers"
	KeyConsumers   = "calibrate.shape.consumers"
	KeyBatch       = "calibrate.shape.batch"
	KeyPrefetch    = "calibrate.shape.prefetch"
	KeyMaxBatch    = "calibrate.shape.max-batch"
	KeyDuration    = "calibrate.duration"
	KeyWarmup      = "calibrate.warmup"
	KeyRounds      = "calibrate.rounds"
	KeyMaxDrain    = "calibrate.max-drain"
	KeyRates       = "calibrate.rates"
)

// Options are a calibration's shape and where it runs.
type Options struct {
	Brokers []string // default: every one with a vendor tool (Brokers)
	Shape   results.Shape
	// Duration is how long each side publishes; Warmup (< Duration) is
	// left out of the publish figures. MaxDrain bounds each drain.
	Duration, Warmup, MaxDrain time.Duration
	// Rounds measures both sides this many times, alternating which goes
	// first; the figures are medians (results.CombineRounds).
	Rounds int
	// Rates, when set, calibrate latency instead of throughput: both
	// sides publish at each rate (messages per second) for Duration with
	// a consumer reading live (rate.go).
	Rates    []float64
	Cfg      config.Config
	Stack    *compose.Env // where the tools are fetched to and logs go
	Progress io.Writer    // one line per step; nil for none
	RunID    string
}

// DefaultShape is the shape of the measurements: 1 KiB, 8
// shards, 8 producers (one per queue for PerfTest and one sending thread
// per queue for RocketMQ), 8 consumers, batches/confirm windows of 100.
func DefaultShape() results.Shape {
	return results.Shape{MessageSize: 1024, Shards: 8, Producers: 8, Consumers: 8, Batch: 100, Prefetch: 256, MaxBatch: 1}
}

// toolSlack is what a JVM tool gets beyond its measured time (start-up,
// connecting, the last report).
const toolSlack = 45 * time.Second

// Validate checks the options; its errors name the option by its key.
func (o *Options) Validate() error {
	s := o.Shape
	if s.MessageSize < 300 {
		return config.Invalid(KeyMessageSize, s.MessageSize, "the driver's envelope alone is ~250 bytes; use 300 or more")
	}
	for _, c := range []struct {
		key string
		n   int
	}{{KeyShards, s.Shards}, {KeyProducers, s.Producers}, {KeyConsumers, s.Consumers}, {KeyBatch, s.Batch}, {KeyPrefetch, s.Prefetch}, {KeyMaxBatch, s.MaxBatch}} {
		if c.n < 1 {
			return config.Invalid(c.key, c.n, "must be 1 or more")
		}
	}
	switch {
	case o.Duration < time.Second:
		return config.Invalid(KeyDuration, o.Duration, "at least 1s")
	case o.Warmup < 0 || o.Warmup >= o.Duration:
		return config.Invalid(KeyWarmup, o.Warmup, "must be shorter than %s %s", KeyDuration, o.Duration)
	case o.Rounds < 1:
		return config.Invalid(KeyRounds, o.Rounds, "at least 1")
	case o.MaxDrain < time.Second:
		return config.Invalid(KeyMaxDrain, o.MaxDrain, "at least 1s")
	}
	for _, r := range o.Rates {
		if !(r > 0) || math.IsInf(r, 0) {
			return config.Invalid(KeyRates, r, "each rate must be a positive number of messages per second")
		}
	}
	for _, b := range o.Brokers {
		v, err := vendorFor(b)
		if err != nil {
			return err
		}
		if err := v.check(o.Cfg); err != nil {
			return err
		}
	}
	return nil
}

// runner is the state one calibration shares between steps.
type runner struct {
	Options
	java, classpath, logDir string
	// toolBin is the vendor's own program when it is one (goInstaller).
	toolBin string
	// privDir holds the files with secrets the vendor tools read
	// (secure.go); secrets are the passwords the runner made for them.
	privDir string
	secrets []string
}

func (r *runner) say(format string, a ...any) {
	if r.Progress != nil {
		fmt.Fprintln(r.Progress, r.redact(fmt.Sprintf(format, a...)))
	}
}

// Run calibrates every broker of o, one after another, and returns the
// result; a broker that fails has its Error set and the others still run.
// The error is for what stops everything (no Java, bad options).
func Run(ctx context.Context, o Options) (*results.Calibration, error) {
	if len(o.Brokers) == 0 {
		o.Brokers = Brokers()
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	java, err := compose.Java(ctx)
	if err != nil {
		return nil, err
	}
	shape := o.Shape
	shape.DurationS, shape.WarmupS = o.Duration.Seconds(), o.Warmup.Seconds()
	if o.Rounds > 1 {
		shape.Rounds = o.Rounds
	}
	shape.Rates = o.Rates
	shape.Confirms = "every message confirmed before it counts: Kafka acks=all, RabbitMQ publisher confirms, RocketMQ synchronous send"
	cal := &results.Calibration{SchemaVersion: results.CalibrationSchemaVersion, RunID: o.RunID, StartedAt: time.Now().UTC(),
		Shape: shape, Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Java: javaVersion(ctx, java), GitCommit: gitCommit()}
	for _, b := range o.Brokers {
		r := &runner{Options: o, java: java, logDir: o.Stack.Path("calibrate", "logs", o.RunID, b)}
		cal.Brokers = append(cal.Brokers, r.broker(ctx, b))
		if ctx.Err() != nil {
			break
		}
	}
	cal.FinishedAt = time.Now().UTC()
	return cal, ctx.Err()
}

// broker measures one broker: vendor publish, vendor drain, driver
// publish, driver drain; with several rounds again, the driver first in
// every second one.
func (r *runner) broker(ctx context.Context, name string) results.BrokerCalibration {
	v, _ := vendorFor(name)
	defer r.removePrivate()
	row := results.BrokerCalibration{Broker: name, Server: serverVersion(ctx, r.Stack, name), Notes: shapeNotes(v, r.Shape)}
	row.Vendor.Tool = v.tool()
	row.Driver.Tool = driverTool(name)
	version, coords := v.fetch()
	var err error
	switch gi, ok := v.(goInstaller); {
	case ok:
		r.say("%-9s fetching %s (cached under %s)", name, strings.Join(coords, ", "), r.Stack.Path("calibrate", name))
		r.toolBin, err = gi.install(ctx, r)
	case len(coords) > 0: // none: a tool of the server's own package (redis-benchmark)
		r.say("%-9s fetching %s (cached under %s)", name, strings.Join(coords, ", "), r.Stack.Path("calibrate", name))
		r.classpath, err = compose.FetchJavaTool(ctx, r.Stack, "calibrate/"+name, "calibrate-"+name, version, coords...)
	}
	if err != nil {
		row.Error = r.redact(err.Error())
		return row
	}
	if len(r.Rates) > 0 {
		row.AtRate = r.atRates(ctx, name, v)
		for _, rc := range row.AtRate {
			if rc.Error != "" && row.Error == "" {
				row.Error = fmt.Sprintf("at %s msgs/s: %s", results.FormatRate(rc.Rate), rc.Error)
			}
		}
		return row
	}
	var rounds []results.BrokerCalibration
	for i := range r.Rounds {
		one := row // broker, server, tools, notes
		sides := []func() error{
			func() error { return r.vendorSide(ctx, name, v, &one.Vendor) },
			func() error { return r.driverSide(ctx, name, &one.Driver) },
		}
		if !results.VendorFirst(i) {
			sides[0], sides[1] = sides[1], sides[0]
		}
		if r.Rounds > 1 {
			r.say("%-9s round %d of %d", name, i+1, r.Rounds)
		}
		for _, side := range sides {
			if err := side(); err != nil && one.Error == "" {
				one.Error = r.redact(err.Error())
			}
		}
		one.Ratios()
		if one.Vendor.SinglePublish != nil {
			r.say("%-9s single-send vendor publish %s (driver ratio %s)", name, results.FormatRate(one.Vendor.SinglePublish.MsgsPerS), results.RatioText(one.SinglePublishRatio))
		}
		r.say("%-9s publish vendor %s driver %s (ratio %s); consume vendor %s driver %s (ratio %s)", name,
			results.FormatRate(one.Vendor.Publish.MsgsPerS), results.FormatRate(one.Driver.Publish.MsgsPerS), results.RatioText(one.PublishRatio),
			results.FormatRate(one.Vendor.Consume.MsgsPerS), results.FormatRate(one.Driver.Consume.MsgsPerS), results.RatioText(one.ConsumeRatio))
		rounds = append(rounds, one)
		if one.Error != "" || ctx.Err() != nil {
			break
		}
	}
	row = results.CombineRounds(rounds)
	return row
}

func (r *runner) vendorSide(ctx context.Context, name string, v vendor, side *results.SideResult) error {
	topic := uniqueTopic(name, "vendor")
	_, cleanup, err := r.openTopic(ctx, name, topic)
	if err != nil {
		return err
	}
	defer cleanup()
	r.say("%-9s vendor publish: %s for %s", name, v.tool(), r.Duration)
	side.Publish = v.publish(ctx, r, topic)
	if side.Publish.Error != "" {
		return fmt.Errorf("vendor publish: %s", side.Publish.Error)
	}
	messages, err := v.backlog(ctx, r, topic, side.Publish.Messages)
	if err != nil {
		return err
	}
	if messages > 0 {
		r.say("%-9s vendor drain of %d messages", name, messages)
	} else {
		r.say("%-9s vendor drain", name)
	}
	side.Consume = v.consume(ctx, r, topic, messages)
	if side.Consume.Error != "" {
		return fmt.Errorf("vendor consume: %s", side.Consume.Error)
	}
	if sp, ok := v.(singlePublisher); ok {
		return r.singleSide(ctx, name, sp, side)
	}
	return nil
}

// singleSide measures the vendor's second publish row into a topic of
// its own, right after its main one.
func (r *runner) singleSide(ctx context.Context, name string, sp singlePublisher, side *results.SideResult) error {
	topic := uniqueTopic(name, "vendor-single")
	_, cleanup, err := r.openTopic(ctx, name, topic)
	if err != nil {
		return err
	}
	defer cleanup()
	r.say("%-9s vendor publish, second row (single sends) for %s", name, r.Duration)
	m := sp.singlePublish(ctx, r, topic)
	side.SinglePublish = &m
	if m.Error != "" {
		return fmt.Errorf("vendor single-send publish: %s", m.Error)
	}
	return nil
}

// serverVersion asks the stack service the broker runs as for its
// version ("" when it cannot say).
func serverVersion(ctx context.Context, e *compose.Env, broker string) string {
	service := brokers.InfoOf(broker).Service
	if service == "" {
		return ""
	}
	svcs, err := compose.Select(e.Variant, []string{service})
	if err != nil {
		return ""
	}
	for _, row := range compose.Status(ctx, e, svcs) {
		if row.Healthy {
			return row.Version
		}
	}
	return ""
}

func uniqueTopic(broker, side string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "calib-" + broker + "-" + side + "-" + hex.EncodeToString(b[:])
}

var javaVersionLine = regexp.MustCompile(`version "([^"]+)"`)

func javaVersion(ctx context.Context, java string) string {
	out, err := exec.CommandContext(ctx, java, "-version").CombinedOutput()
	if err != nil {
		return ""
	}
	if m := javaVersionLine.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

func gitCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}
