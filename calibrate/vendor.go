package calibrate

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxbench/inboxbench/brokers"
	kafkadriver "github.com/inboxbench/inboxbench/brokers/kafka"
	rabbitdriver "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	rocketdriver "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// Vendor tool versions. Kafka's tools are the stack's Kafka release.
// PerfTest 2.22.1 and rocketmq-example 5.5.0 are the newest versions
// Maven Central serves here; rocketmq-example is published for few 5.x
// releases (none for 5.3.3), and its benchmark classes speak the same
// remoting protocol to the 5.3.3 broker.
const (
	PerfTestVersion        = "2.22.1"
	RocketMQExampleVersion = "5.5.0"
)

// jvmHeap is the heap every vendor tool gets: the size of Kafka's
// kafka-producer-perf-test.sh default, well above what 1 KiB messages need.
var jvmHeap = []string{"-Xms256m", "-Xmx512m"}

// vendor is one broker's perf tool: how to fetch it, and how to run its
// producer and its consumer on the shape.
type vendor interface {
	// fetch names the Maven artifacts and the version the marker records.
	fetch() (version string, coords []string)
	// tool describes the program for the result.
	tool() string
	// publish runs the producer into topic (already created with the
	// shape's shards) and parses its output.
	publish(ctx context.Context, r *runner, topic string) results.Measurement
	// backlog is what the drain of topic must read after the vendor
	// published the given count.
	backlog(ctx context.Context, r *runner, topic string, published int64) (int64, error)
	// consume drains topic, which holds messages, as a new group.
	consume(ctx context.Context, r *runner, topic string, messages int64) results.Measurement
	// check refuses settings the tool cannot be given.
	check(cfg config.Config) error
	// notes say where the vendor tool's shape differs from the driver's
	// unavoidably; docs/calibration.md explains each.
	notes(s results.Shape) []string
}

// vendors are the perf tools by the name of the broker driver they are
// measured against: what can be calibrated. A driver without one is not.
var vendors = map[string]vendor{kafkadriver.Name: kafkaVendor{}, rabbitdriver.Name: rabbitVendor{}, rocketdriver.Name: rocketVendor{}}

// Brokers lists the brokers calibrate has a vendor perf tool for, sorted:
// the ones it calibrates unless told otherwise.
func Brokers() []string { return slices.Sorted(maps.Keys(vendors)) }

// Tool describes the vendor perf tool calibrate runs against broker's
// driver ("" when it has none).
func Tool(broker string) string {
	if v, ok := vendors[broker]; ok {
		return v.tool()
	}
	return ""
}

func vendorFor(broker string) (vendor, error) {
	if v, ok := vendors[broker]; ok {
		return v, nil
	}
	return nil, config.Invalid(KeyBrokers, broker, "no vendor perf tool for this broker: calibrate knows %s", strings.Join(Brokers(), ", "))
}

// measured turns a tool's output and parse result into a Measurement.
func measured(cmd []string, f Figure, err error) results.Measurement {
	m := results.Measurement{Command: redactArgs(cmd), MsgsPerS: f.MsgsPerS, Messages: f.Messages, Method: f.Method, Series: roundAll(f.Series)}
	if err != nil {
		m.Error = err.Error()
	}
	return m
}

// redactArgs hides passwords in URLs (PerfTest's --uri) from the command
// line recorded in calibrate.json; the tool itself got them.
func redactArgs(cmd []string) []string {
	out := make([]string, len(cmd))
	for i, a := range cmd {
		out[i] = config.Redact(a)
	}
	return out
}

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Round(x)
	}
	return out
}

// javaCmd is the command line a user can paste: java, heap, classpath,
// main class, arguments.
func (r *runner) javaCmd(main string, args ...string) []string {
	cmd := append([]string{r.java}, jvmHeap...)
	cmd = append(cmd, "-cp", r.classpath, main)
	return append(cmd, args...)
}

// --- Kafka -------------------------------------------------------------

type kafkaVendor struct{}

func (kafkaVendor) fetch() (string, []string) {
	return compose.KafkaVersion, []string{
		"org.apache.kafka:kafka-tools:" + compose.KafkaVersion,
		// The tools log through SLF4J 1.7; without a binding they print a
		// warning and nothing else, which is what we want: the NOP binding.
		"org.slf4j:slf4j-nop:1.7.36",
	}
}

func (kafkaVendor) tool() string {
	return "org.apache.kafka:kafka-tools:" + compose.KafkaVersion + " ProducerPerformance / ConsumerPerformance"
}

// publish: one ProducerPerformance (one producer client sending
// asynchronously, records without a key, acks=all, the client's default
// batching: linger.ms=5, batch.size=16384, idempotence on) until its
// report windows cover the shape's duration.
func (kafkaVendor) publish(ctx context.Context, r *runner, topic string) results.Measurement {
	// Values as large as a driver record's key, value and headers (a key
	// and an id header), so both sides move the same bytes per record.
	m, err := r.sampleMessage()
	if err != nil {
		return measured(nil, Figure{}, err)
	}
	size := kafkadriver.RecordBytes(m)
	cmd := r.javaCmd("org.apache.kafka.tools.ProducerPerformance",
		"--topic", topic, "--num-records", "1000000000", "--record-size", strconv.Itoa(size),
		"--throughput", "-1", "--producer-props", "bootstrap.servers="+strings.Join(r.Cfg.List(kafkadriver.SettingBrokers), ","), "acks=all")
	var covered float64
	out, err := runTool(ctx, r.java, r.logDir, toolRun{name: "kafka-producer", args: cmd[1:],
		timeout: r.Duration + toolSlack,
		until: func(line string) bool {
			if m := producerPerfRE.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseFloat(m[1], 64)
				if rate, _ := strconv.ParseFloat(m[2], 64); rate > 0 {
					covered += n / rate
				}
			}
			return covered >= r.Duration.Seconds()-0.5
		}})
	if err != nil {
		return measured(cmd, Figure{}, err)
	}
	f, err := ParseProducerPerformance(out, r.Warmup)
	return measured(cmd, f, err)
}

// consume: one ConsumerPerformance (one consumer client, all partitions)
// reading exactly the topic's messages as a new group from the earliest
// offset.
func (kafkaVendor) consume(ctx context.Context, r *runner, topic string, messages int64) results.Measurement {
	cmd := r.javaCmd("org.apache.kafka.tools.ConsumerPerformance",
		"--bootstrap-server", strings.Join(r.Cfg.List(kafkadriver.SettingBrokers), ","), "--topic", topic,
		"--messages", strconv.FormatInt(messages, 10), "--group", topic+"-vendor-g", "--timeout", "10000")
	out, err := runTool(ctx, r.java, r.logDir, toolRun{name: "kafka-consumer", args: cmd[1:], timeout: r.MaxDrain + toolSlack})
	if err != nil {
		return measured(cmd, Figure{}, err)
	}
	f, err := ParseConsumerPerformance(out)
	return measured(cmd, f, err)
}

// backlog sums the topic's end offsets: ProducerPerformance, stopped, does
// not say how many of its records were acked.
func (kafkaVendor) backlog(ctx context.Context, r *runner, topic string, _ int64) (int64, error) {
	opts, err := kafkadriver.ClientOpts(r.Cfg)
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka: end offsets of %s: %w", topic, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// --- RabbitMQ ----------------------------------------------------------

type rabbitVendor struct{}

func (rabbitVendor) backlog(_ context.Context, _ *runner, _ string, published int64) (int64, error) {
	return published, nil
}

func (rabbitVendor) fetch() (string, []string) {
	return PerfTestVersion, []string{"com.rabbitmq:perf-test:" + PerfTestVersion}
}

func (rabbitVendor) tool() string { return "com.rabbitmq:perf-test:" + PerfTestVersion + " PerfTest" }

// perfTestQueues points PerfTest at the driver's shard queues
// "<topic>.0" … "<topic>.<shards-1>", which Setup declared (quorum,
// single active consumer): --predeclared keeps PerfTest from declaring its
// own, and with a queue pattern each producer channel and each consumer
// gets one queue, round robin.
func (r *runner) perfTestQueues(topic string) []string {
	return []string{"--queue-pattern", topic + ".%d", "--queue-pattern-from", "0",
		"--queue-pattern-to", strconv.Itoa(r.Shape.Shards - 1), "--predeclared", "--auto-delete", "false"}
}

func (r *runner) perfTestURI() string {
	raw := r.Cfg.Get(rabbitdriver.SettingURL)
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.String()
}

// publish: PerfTest producers only, one channel per queue (Producers
// connections × shards/Producers channels), persistent messages, a
// sliding confirm window of Batch unconfirmed messages per channel, and
// the properties and headers the driver's messages carry.
func (rabbitVendor) publish(ctx context.Context, r *runner, topic string) results.Measurement {
	s := r.Shape
	m, err := r.sampleMessage()
	if err != nil {
		return measured(nil, Figure{}, err)
	}
	channels := (s.Shards + s.Producers - 1) / s.Producers
	args := []string{"--uri", r.perfTestURI(), "--producers", strconv.Itoa(s.Producers),
		"--producer-channel-count", strconv.Itoa(channels), "--consumers", "0",
		"--confirm", strconv.Itoa(s.Batch), "--size", strconv.Itoa(s.MessageSize), "--flag", "persistent",
		"--time", strconv.Itoa(int(math.Ceil(r.Duration.Seconds()))), "--id", "calibrate-publish",
		"--message-properties", perfTestProperties(m, time.Now())}
	cmd := r.javaCmd("com.rabbitmq.perf.PerfTest", append(args, r.perfTestQueues(topic)...)...)
	out, err := runTool(ctx, r.java, r.logDir, toolRun{name: "rabbitmq-perftest-publish", args: cmd[1:], timeout: r.Duration + toolSlack})
	if err != nil {
		return measured(cmd, Figure{}, err)
	}
	f, err := ParsePerfTestPublish(out, r.Warmup)
	return measured(cmd, f, err)
}

// perfTestProperties gives PerfTest's messages what the driver puts in
// m's (brokers/rabbitmq/publisher.go): content type, a message id, the
// key and send-time headers, and m's own headers. PerfTest sends constant
// values; the broker parses them all the same. Without them PerfTest's
// messages have no headers, and the broker takes about a fifth more of
// them per second.
func perfTestProperties(m brokers.Message, at time.Time) string {
	props := []string{
		"contentType=" + rabbitdriver.ContentType,
		"messageId=" + m.ID,
		rabbitdriver.HeaderKey + "=" + m.Key,
		rabbitdriver.HeaderSent + "=" + strconv.FormatInt(at.UnixNano(), 10),
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		props = append(props, k+"="+m.Headers[k])
	}
	return strings.Join(props, ",")
}

// consume: PerfTest consumers only, one channel per queue (Consumers
// connections × shards/Consumers channels, so no queue is left without a
// consumer), manual acks one by one (PerfTest's default), the shape's
// prefetch, until the queues are empty.
func (rabbitVendor) consume(ctx context.Context, r *runner, topic string, _ int64) results.Measurement {
	s := r.Shape
	channels := (s.Shards + s.Consumers - 1) / s.Consumers
	args := []string{"--uri", r.perfTestURI(), "--producers", "0", "--consumers", strconv.Itoa(s.Consumers),
		"--consumer-channel-count", strconv.Itoa(channels),
		"--qos", strconv.Itoa(s.Prefetch), "--exit-when", "empty",
		"--time", strconv.Itoa(int(math.Ceil(r.MaxDrain.Seconds()))), "--id", "calibrate-consume"}
	cmd := r.javaCmd("com.rabbitmq.perf.PerfTest", append(args, r.perfTestQueues(topic)...)...)
	out, err := runTool(ctx, r.java, r.logDir, toolRun{name: "rabbitmq-perftest-consume", args: cmd[1:], timeout: r.MaxDrain + toolSlack})
	if err != nil {
		return measured(cmd, Figure{}, err)
	}
	f, err := ParsePerfTestConsume(out)
	return measured(cmd, f, err)
}

// --- RocketMQ ----------------------------------------------------------

type rocketVendor struct{}

func (rocketVendor) backlog(_ context.Context, _ *runner, _ string, published int64) (int64, error) {
	return published, nil
}

func (rocketVendor) fetch() (string, []string) {
	return RocketMQExampleVersion, []string{"org.apache.rocketmq:rocketmq-example:" + RocketMQExampleVersion}
}

func (rocketVendor) tool() string {
	return "org.apache.rocketmq:rocketmq-example:" + RocketMQExampleVersion + " benchmark.Producer / benchmark.Consumer"
}

// rocketJVM keeps the client's logs under the stack directory.
func (r *runner) rocketJVM() []string {
	return []string{"-Drocketmq.client.logRoot=" + r.logDir, "-Drocketmq.client.logLevel=WARN"}
}

// rocketBacklogFactor: the benchmark Producer runs this many times the
// shape's duration. Its Consumer reports only sliding 9 s windows one
// second apart, from which the drain's seconds are reconstructed; a
// backlog of one duration (~180k messages) drains in 3–4 s at the
// consumer's speed, too few whole seconds for a rate, so the producer
// leaves twice as much. Its figure is the last 9 s window either way.
const rocketBacklogFactor = 2

// publish: the benchmark Producer with Producers threads, each sending one
// message at a time synchronously (SendSync), no key (the default queue
// selector spreads messages round robin), reporting every second, stopped
// once it has sent for rocketBacklogFactor × the shape's duration.
func (rocketVendor) publish(ctx context.Context, r *runner, topic string) results.Measurement {
	s := r.Shape
	cmd := r.javaCmd("org.apache.rocketmq.example.benchmark.Producer",
		"-n", strings.Join(r.Cfg.List(rocketdriver.SettingNamesrv), ";"), "-t", topic, "-w", strconv.Itoa(s.Producers),
		"-s", strconv.Itoa(s.MessageSize), "-k", "false", "-ri", "1000")
	cmd = append(cmd[:1], append(r.rocketJVM(), cmd[1:]...)...)
	lines := 0
	out, err := runTool(ctx, r.java, r.logDir, toolRun{name: "rocketmq-producer", args: cmd[1:],
		timeout: rocketBacklogFactor*r.Duration + toolSlack + 10*time.Second,
		until: func(line string) bool {
			if rmqSendRE.MatchString(line) {
				lines++
			}
			// Line k covers seconds k … k+9 after launch.
			return float64(lines+rmqWindow) >= rocketBacklogFactor*r.Duration.Seconds()
		}})
	if err != nil {
		return measured(cmd, Figure{}, err)
	}
	f, err := ParseRocketMQProducer(out, r.Warmup)
	return measured(cmd, f, err)
}

// consume: the benchmark Consumer (a concurrent push consumer with
// Consumers consume threads, a new group, which the broker starts at
// offset 0 of a topic still in its page cache) until its sliding TPS
// window fell back to 0 after the drain.
func (rocketVendor) consume(ctx context.Context, r *runner, topic string, _ int64) results.Measurement {
	cmd := r.javaCmd("org.apache.rocketmq.example.benchmark.Consumer",
		"-n", strings.Join(r.Cfg.List(rocketdriver.SettingNamesrv), ";"), "-t", topic, "-g", topic+"_vendor_g",
		"-w", strconv.Itoa(r.Shape.Consumers), "-ri", "1000")
	cmd = append(cmd[:1], append(r.rocketJVM(), cmd[1:]...)...)
	seen := false
	out, err := runTool(ctx, r.java, r.logDir, toolRun{name: "rocketmq-consumer", args: cmd[1:],
		timeout: r.MaxDrain + toolSlack + 10*time.Second,
		until: func(line string) bool {
			m := rmqConsumeRE.FindStringSubmatch(line)
			if m == nil {
				return false
			}
			if m[1] != "0" {
				seen = true
			}
			return seen && m[1] == "0"
		}})
	if err != nil {
		return measured(cmd, Figure{}, err)
	}
	f, err := ParseRocketMQConsumer(out)
	return measured(cmd, f, err)
}

func (kafkaVendor) notes(results.Shape) []string {
	return []string{"ProducerPerformance is one producer client sending without waiting (unbounded in flight up to buffer.memory, linger.ms=5, batch.size=16384), records without key or headers whose value is as large as the driver's key, value and headers together (so both move the same bytes per record); ConsumerPerformance is one consumer client; the producers/consumers counts do not apply to them"}
}

func (rabbitVendor) notes(s results.Shape) []string {
	return []string{fmt.Sprintf("PerfTest keeps a sliding window of %d unconfirmed messages per channel, one channel per queue (%d in flight at most); the driver's publishers each send a batch on a confirm channel of their own and wait for all its confirms before the next (%d in flight at most, fewer on average)", s.Batch, s.Batch*s.Shards, s.Batch*s.Producers),
		"PerfTest's messages carry the driver's properties and headers (content type, message id, key, send time) as constants (--message-properties); without them it publishes about a fifth more messages per second"}
}

func (rocketVendor) notes(s results.Shape) []string {
	return []string{
		fmt.Sprintf("benchmark Producer: %d threads, each one synchronous send at a time, no key (round robin over queues); the driver's publishers send each Publish call's messages of one queue (the key's hash queue) as one synchronous batch send, so a key's order holds", s.Producers),
		fmt.Sprintf("the benchmark Producer runs %d× the duration, so its Consumer's drain lasts long enough to be resolved from its 1 s sliding-window reports; its figure is its last 9 s window", rocketBacklogFactor),
		"benchmark Consumer is a concurrent push consumer; the driver's is orderly (a broker lock per queue, one batch of a queue at a time)"}
}

func (kafkaVendor) check(cfg config.Config) error {
	for _, s := range []struct {
		key string
		set bool
	}{{kafkadriver.SettingTLS, cfg.Bool(kafkadriver.SettingTLS)}, {kafkadriver.SettingCAFile, cfg.Get(kafkadriver.SettingCAFile) != ""},
		{kafkadriver.SettingSASL, cfg.Get(kafkadriver.SettingSASL) != ""}} {
		if s.set {
			return config.Invalid(s.key, nil, "calibrate passes only bootstrap.servers to Kafka's vendor tools: TLS and SASL clusters are not supported")
		}
	}
	return nil
}

func (rabbitVendor) check(config.Config) error { return nil }
func (rocketVendor) check(config.Config) error { return nil }
