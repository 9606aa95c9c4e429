package calibrate

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/kafkashare"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/schema"

	_ "github.com/inboxbench/inboxbench/brokers/all" // the drivers register themselves
)

// runWritten runs the calibration o, writes its calibrate.json to out and
// checks the file against its JSON Schema.
func runWritten(t *testing.T, o Options, out string) *results.Calibration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cal, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	path, err := cal.Write(out)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	} else if err := schema.Validate(schema.Calibrate, raw); err != nil {
		t.Errorf("calibrate.json does not match results/schema/calibrate.schema.json:\n%v", err)
	}
	return cal
}

// A short calibration of one broker against the real server: the vendor
// tool is fetched (or found in <stack>/calibrate), runs, its output is
// parsed, the driver runs on the same shape, and calibrate.json holds
// positive rates for all four figures and both ratios, and matches its
// JSON Schema.
func shortCalibration(t *testing.T, broker string, duration time.Duration) {
	cfg := testenv.Require(t, cmp.Or(brokers.InfoOf(broker).Service, broker))
	dir := testenv.StackDir(t, cfg) // the tools are cached there, beside the stack's Maven cache
	shape := DefaultShape()
	o := Options{Brokers: []string{broker}, Shape: shape, Duration: duration, Warmup: time.Second, MaxDrain: 60 * time.Second,
		Cfg: cfg, Stack: &compose.Env{Dir: dir, Cfg: cfg}, RunID: "test-" + broker}
	out := t.TempDir()
	runWritten(t, o, out)
	back, err := results.ReadCalibration(filepath.Join(out, results.CalibrationFile))
	if err != nil {
		t.Fatalf("calibrate.json does not read back: %v", err)
	}
	if len(back.Brokers) != 1 || back.Brokers[0].Broker != broker {
		t.Fatalf("calibrate.json rows: %+v", back.Brokers)
	}
	b := back.Brokers[0]
	if b.Error != "" {
		t.Fatalf("%s: %s", broker, b.Error)
	}
	// No Redis tool consumes a stream: its row has no figure, and says why.
	noConsumer := broker == testenv.Redis
	if vc := b.Vendor.Consume; noConsumer && (vc.MsgsPerS != 0 || !strings.HasPrefix(vc.Method, "no vendor figure") || b.ConsumeRatio != 0) {
		t.Errorf("%s vendor consume: %+v, ratio %v: want no figure and the reason", broker, vc, b.ConsumeRatio)
	}
	for name, m := range map[string]results.Measurement{
		"vendor publish": b.Vendor.Publish, "vendor consume": b.Vendor.Consume,
		"driver publish": b.Driver.Publish, "driver consume": b.Driver.Consume,
	} {
		if noConsumer && name == "vendor consume" {
			continue
		}
		if m.MsgsPerS <= 0 || m.Method == "" || m.Error != "" {
			t.Errorf("%s %s: %.1f msgs/s, method %q, error %q", broker, name, m.MsgsPerS, m.Method, m.Error)
		}
	}
	if len(b.Vendor.Publish.Command) == 0 || (len(b.Vendor.Consume.Command) == 0) != noConsumer {
		t.Errorf("%s: the vendor command lines are not recorded", broker)
	}
	if b.PublishRatio <= 0 || (b.ConsumeRatio <= 0 && !noConsumer) {
		t.Errorf("%s: ratios publish %.2f consume %.2f", broker, b.PublishRatio, b.ConsumeRatio)
	}
	if e := b.Estimates; e == nil || e.PublishRatio.N != 1 || e.PublishRatio.Median != b.PublishRatio {
		t.Errorf("%s: estimates %+v, want one round's", broker, e)
	}
	if broker == testenv.RocketMQ {
		sp := b.Vendor.SinglePublish
		if sp == nil || sp.MsgsPerS <= 0 || sp.Error != "" || !strings.Contains(strings.Join(sp.Command, " "), "benchmark.Producer") {
			t.Errorf("rocketmq: the single-send row %+v", sp)
		}
		if !strings.Contains(strings.Join(b.Vendor.Publish.Command, " "), "benchmark.BatchProducer") {
			t.Errorf("rocketmq: the publish row is not BatchProducer's: %v", b.Vendor.Publish.Command)
		}
		if b.SinglePublishRatio <= 0 {
			t.Errorf("rocketmq: single-send ratio %v", b.SinglePublishRatio)
		}
	}
	t.Logf("%s: publish vendor %.0f driver %.0f (%.2f); consume vendor %.0f driver %.0f (%.2f)", broker,
		b.Vendor.Publish.MsgsPerS, b.Driver.Publish.MsgsPerS, b.PublishRatio, b.Vendor.Consume.MsgsPerS, b.Driver.Consume.MsgsPerS, b.ConsumeRatio)
}

// A short latency calibration at a rate: both sides (the driver alone
// for RocketMQ) publish at the rate with a consumer reading, and
// calibrate.json holds their latencies as estimates of one round.
func shortRateCalibration(t *testing.T, broker string, rate float64, duration time.Duration) {
	cfg := testenv.Require(t, broker)
	dir := testenv.StackDir(t, cfg)
	o := Options{Brokers: []string{broker}, Shape: DefaultShape(), Duration: duration, Warmup: time.Second, MaxDrain: 60 * time.Second,
		Rates: []float64{rate}, Cfg: cfg, Stack: &compose.Env{Dir: dir, Cfg: cfg}, RunID: "test-rate-" + broker}
	cal := runWritten(t, o, t.TempDir())
	if !cal.HasRates() || cal.HasThroughput() {
		t.Fatalf("a calibration at a rate has rates %v and throughput %v", cal.HasRates(), cal.HasThroughput())
	}
	b := cal.Brokers[0]
	if b.Error != "" {
		t.Fatalf("%s: %s", broker, b.Error)
	}
	rc := b.AtRate[0]
	d := rc.Driver
	// What rate the driver held is a measurement, not a test's business
	// (a busy machine holds less): it must have measured one.
	if d.Achieved == nil || d.Achieved.Median <= 0 || d.PublishP99 == nil || d.E2EP99 == nil || d.LagP99 == nil || len(d.Rounds) != 1 {
		t.Errorf("%s driver at %v/s: %+v", broker, rate, d)
	}
	v := rc.Vendor
	switch broker {
	case testenv.RocketMQ:
		if len(v.Rounds) != 0 || !strings.Contains(v.Absent, "no rate option") {
			t.Errorf("rocketmq vendor at a rate: %+v", v)
		}
	case testenv.Kafka:
		if v.Achieved == nil || v.PublishP50 == nil || v.PublishP99 == nil || v.E2EP99 != nil || !strings.Contains(v.Absent, "EndToEndLatency") {
			t.Errorf("kafka vendor at a rate: %+v", v)
		}
	default:
		if v.Achieved == nil || v.PublishP99 == nil || v.E2EP50 == nil || v.E2EP99 == nil {
			t.Errorf("%s vendor at a rate: %+v", broker, v)
		}
	}
	t.Logf("%s at %v/s: vendor %+v; driver %+v", broker, rate, v.Rounds, d.Rounds)
}

func TestCalibrateRateKafka(t *testing.T) {
	shortRateCalibration(t, testenv.Kafka, 1000, 5*time.Second)
}
func TestCalibrateRateRabbitMQ(t *testing.T) {
	shortRateCalibration(t, testenv.RabbitMQ, 1000, 5*time.Second)
}
func TestCalibrateRateRocketMQ(t *testing.T) {
	shortRateCalibration(t, testenv.RocketMQ, 1000, 5*time.Second)
}

func TestCalibrateKafka(t *testing.T) { shortCalibration(t, testenv.Kafka, 6*time.Second) }
func TestCalibrateKafkaShare(t *testing.T) {
	shortCalibration(t, kafkashare.Name, 6*time.Second)
}
func TestCalibrateRabbitMQ(t *testing.T) { shortCalibration(t, testenv.RabbitMQ, 4*time.Second) }
func TestCalibrateRedis(t *testing.T)    { shortCalibration(t, testenv.Redis, 4*time.Second) }

// The benchmark Producer prints its first report 10 s after launch.
func TestCalibrateRocketMQ(t *testing.T) { shortCalibration(t, testenv.RocketMQ, 11*time.Second) }
