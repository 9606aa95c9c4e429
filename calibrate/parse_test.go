package calibrate

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/internal/testenv/golden"
	"github.com/inboxbench/inboxbench/results"
)

// The recorded outputs in testdata/ are the tools' real stdout, captured
// by `bench calibrate` (<stack>/calibrate/logs) on the local stack; the
// golden files hold what the parsers make of them.
func TestParsersGolden(t *testing.T) {
	warmup := 5 * time.Second
	cases := []struct {
		file  string
		parse func(string) (Figure, error)
	}{
		{"kafka-producer.txt", func(s string) (Figure, error) { return ParseProducerPerformance(s, warmup) }},
		{"kafka-producer-complete.txt", func(s string) (Figure, error) { return ParseProducerPerformance(s, warmup) }},
		{"kafka-consumer.txt", ParseConsumerPerformance},
		{"kafka-share-consumer.txt", ParseShareConsumerPerformance},
		{"rabbitmq-perftest-publish.txt", func(s string) (Figure, error) { return ParsePerfTestPublish(s, warmup) }},
		{"rabbitmq-perftest-consume.txt", ParsePerfTestConsume},
		{"rocketmq-producer.txt", func(s string) (Figure, error) { return ParseRocketMQProducer(s, warmup) }},
		{"rocketmq-consumer.txt", ParseRocketMQConsumer},
		{"rocketmq-producer-long.txt", func(s string) (Figure, error) { return ParseRocketMQProducer(s, warmup) }},
		{"rocketmq-consumer-long.txt", ParseRocketMQConsumer},
		{"rocketmq-batch-producer.txt", func(s string) (Figure, error) { return ParseRocketMQBatchProducer(s, warmup) }},
		{"redis-benchmark.txt", func(s string) (Figure, error) { return ParseRedisBenchmark(s, 136000) }},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			f := parseFile(t, tc.file, tc.parse)
			if f.MsgsPerS <= 0 {
				t.Errorf("rate %v, want > 0", f.MsgsPerS)
			}
			f.MsgsPerS = math.Round(f.MsgsPerS*10) / 10
			for i := range f.Series {
				f.Series[i] = math.Round(f.Series[i])
			}
			got, _ := json.MarshalIndent(f, "", "  ")
			golden.Check(t, filepath.Join("testdata", strings.TrimSuffix(tc.file, ".txt")+".golden.json"), append(got, '\n'))
		})
	}
}

// parseFile is what parse makes of the recorded output testdata/file.
func parseFile[F any](t *testing.T, file string, parse func(string) (F, error)) F {
	t.Helper()
	in, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parse(string(in))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return f
}

// The parsers of the tools at a rate read their summaries' latencies
// from recorded output (testdata/*-rate.txt, captured by `bench
// calibrate --rate` on the local stack).
func TestRateParsersGolden(t *testing.T) {
	for _, tc := range []struct {
		file  string
		parse func(string) (results.RateFigures, error)
	}{
		{"kafka-producer-rate.txt", ParseProducerPerformanceAtRate},
		{"rabbitmq-perftest-rate.txt", ParsePerfTestAtRate},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f := parseFile(t, tc.file, tc.parse)
			if f.Achieved <= 0 || f.Messages <= 0 || f.PublishP50 <= 0 || f.PublishP99 < f.PublishP50 {
				t.Errorf("figures %+v", f)
			}
			got, _ := json.MarshalIndent(f, "", "  ")
			golden.Check(t, filepath.Join("testdata", strings.TrimSuffix(tc.file, ".txt")+".golden.json"), append(got, '\n'))
		})
	}
	// Kafka's summary is in whole milliseconds: 0 is under one, counted
	// as half of one rather than as nothing.
	f, err := ParseProducerPerformanceAtRate("100 records sent, 99.9 records/sec (0.10 MB/sec), 0.40 ms avg latency, 3.00 ms max latency, 0 ms 50th, 1 ms 95th, 2 ms 99th, 3 ms 99.9th.\n")
	if err != nil || f.PublishP50 != 500 || f.PublishP99 != 2000 {
		t.Errorf("sub-millisecond summary: %+v, %v", f, err)
	}
	// PerfTest run with --use-millis prints milliseconds.
	f, err = ParsePerfTestAtRate("id: x, time 1.000 s, sent: 10 msg/s, received: 10 msg/s\nid: x, sending rate avg: 10 msg/s\nid: x, consumer latency min/median/75th/95th/99th 1/2/3/4/5 ms\nid: x, confirm latency min/median/75th/95th/99th 1/1/1/2/3 ms\n")
	if err != nil || f.E2EP50 != 2000 || f.E2EP99 != 5000 || f.PublishP99 != 3000 || f.Messages != 10 {
		t.Errorf("PerfTest in ms: %+v, %v", f, err)
	}
}

func TestParsersRejectForeignOutput(t *testing.T) {
	junk := "Exception in thread \"main\" java.lang.NoClassDefFoundError: org/apache/kafka/tools/X\n"
	for name, err := range map[string]error{
		"ProducerPerformance": second(ParseProducerPerformance(junk, time.Second)),
		"ConsumerPerformance": second(ParseConsumerPerformance(junk)),
		"ShareConsumerPerf":   second(ParseShareConsumerPerformance(junk + "start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms\n")),
		"PerfTest publish":    second(ParsePerfTestPublish(junk, time.Second)),
		"PerfTest consume":    second(ParsePerfTestConsume(junk)),
		"RocketMQ producer":   second(ParseRocketMQProducer(junk, time.Second)),
		"RocketMQ consumer":   second(ParseRocketMQConsumer(junk)),
		"RocketMQ batch":      second(ParseRocketMQBatchProducer(junk, time.Second)),
		"ProducerPerf rate":   second(ParseProducerPerformanceAtRate(junk)),
		"PerfTest rate":       second(ParsePerfTestAtRate(junk)),
	} {
		if err == nil {
			t.Errorf("%s: no error on output without a report line", name)
		}
	}
	// A consumer whose window never fell back to 0 did not finish.
	unfinished := "Current Time: 2026-11-30 16:11:00,005 | Consume TPS: 78 | AVG(B2C) RT(ms): 1 | AVG(S2C) RT(ms): 1 | MAX(B2C) RT(ms): 1 | MAX(S2C) RT(ms): 1 | Consume Fail: 0\n"
	if _, err := ParseRocketMQConsumer(unfinished); err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Errorf("unfinished drain: got %v", err)
	}
	// A consumer that received nothing says so, not that it did not finish.
	idle := strings.Repeat(strings.Replace(unfinished, "Consume TPS: 78", "Consume TPS: 0", 1), 3)
	if _, err := ParseRocketMQConsumer(idle); err == nil || !strings.Contains(err.Error(), "received nothing in 3 report lines") {
		t.Errorf("a consumer that received nothing: got %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// unslide inverts the RocketMQ benchmark's sliding 9 s window exactly: a
// drain turned into the tool's window rates comes back second by second.
func TestUnslideRecoversCounts(t *testing.T) {
	counts := []float64{0, 0, 0, 1200, 3400, 3500, 3300, 3600, 900, 0, 0, 0}
	var w []float64
	for i := 0; i+rmqWindow <= len(counts)+rmqWindow; i++ {
		var n float64
		for j := i; j < i+rmqWindow && j < len(counts); j++ {
			n += counts[j]
		}
		w = append(w, n/rmqWindow)
		if i >= len(counts) {
			break
		}
	}
	got := unslide(w, rmqWindow)
	for i, c := range counts {
		if math.Abs(got[i]-c) > 1e-6 {
			t.Fatalf("second %d: got %v, want %v (all: %v)", i, got[i], c, got)
		}
	}
	for _, c := range got[len(counts):] {
		if c != 0 {
			t.Fatalf("counts after the drain: %v", got[len(counts):])
		}
	}
}

func TestDrainRate(t *testing.T) {
	cases := []struct {
		name   string
		counts []float64
		want   float64
		secs   int
	}{
		// partial first and last seconds are dropped
		{"steady", []float64{0, 1200, 3400, 3500, 3300, 3600, 900, 0}, 3450, 4},
		// stragglers and noise far from the drain are not part of it
		{"noise", []float64{0, 9, 144, 0, 0, 27, 0, 315, 0, 1675, 7754, 7578, 2960, 0}, 7666, 2},
		// too short to drop edges: all over all, a lower bound
		{"short", []float64{0, 500, 1500, 0}, 1000, 2},
		{"empty", []float64{0, 0}, 0, 0},
	}
	for _, tc := range cases {
		got, secs, _ := DrainRate(tc.counts)
		if math.Abs(got-tc.want) > 0.5 || secs != tc.secs {
			t.Errorf("%s: DrainRate = %.1f over %d s, want %.1f over %d s", tc.name, got, secs, tc.want, tc.secs)
		}
	}
}

// PerfTest's messages are shaped after the driver's: its id and key, the
// driver's send-time header, and whatever headers the driver side adds.
func TestPerfTestPropertiesFollowTheDriverMessage(t *testing.T) {
	m := brokers.Message{ID: "calib-7", Key: "key-3", Headers: map[string]string{"b": "2", "a": "1"}}
	got := perfTestProperties(m, time.Unix(0, 42))
	want := "contentType=application/cloudevents+json,messageId=calib-7,ib-key=key-3,ib-sent=42,a=1,b=2"
	if got != want {
		t.Fatalf("perfTestProperties:\n got %s\nwant %s", got, want)
	}
}
