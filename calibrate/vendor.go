package calibrate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxbench/inboxbench/brokers"
	kafkadriver "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/brokers/kafkashare"
	natsdriver "github.com/inboxbench/inboxbench/brokers/nats"
	rabbitdriver "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	redisdriver "github.com/inboxbench/inboxbench/brokers/redis"
	rocketdriver "github.com/inboxbench/inboxbench/brokers/rocketmq"
	kafkastack "github.com/inboxbench/inboxbench/compose/kafka"
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

// jvmOpts are what every vendor tool's JVM gets: the heap of Kafka's
// kafka-producer-perf-test.sh default, well above what 1 KiB messages
// need, and no hsperfdata file, which would record the tool's arguments
// (an access key's secret) in the temporary directory for jps and jcmd.
var jvmOpts = []string{"-Xms256m", "-Xmx512m", "-XX:-UsePerfData"}

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
	// atRate publishes into topic (created with the shape's shards) at
	// rate messages per second for the shape's duration, its consumers
	// reading live where the tool has them, and returns its latencies;
	// errNoRate when the tool cannot publish at a rate.
	atRate(ctx context.Context, r *runner, topic string, rate float64) (results.RateFigures, []string, error)
	// rateInfo says where atRate's figures come from ("" when the tool
	// cannot publish at a rate), which ones the tool has not (and why),
	// and what the comparison rests on.
	rateInfo() (method, absent string, notes []string)
}

// errNoRate: the vendor tool has no way to publish at a rate.
var errNoRate = errors.New("the vendor tool cannot publish at a rate")

// singlePublisher is a vendor with a second publish figure beside its
// main one (RocketMQ: the single-send Producer beside BatchProducer).
type singlePublisher interface {
	singlePublish(ctx context.Context, r *runner, topic string) results.Measurement
}

// vendors are the perf tools by the name of the broker driver they are
// measured against: what can be calibrated. A driver without one is not.
var vendors = map[string]vendor{kafkadriver.Name: kafkaVendor{}, rabbitdriver.Name: rabbitVendor{}, rocketdriver.Name: rocketVendor{},
	natsdriver.Name: natsVendor{}, redisdriver.Name: redisVendor{}, kafkashare.Name: shareVendor{}}

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

// measured turns a tool's output and parse result into a Measurement,
// its command line and error with every secret masked.
func (r *runner) measured(cmd []string, f Figure, err error) results.Measurement {
	m := results.Measurement{Command: r.redactArgs(cmd), MsgsPerS: f.MsgsPerS, Messages: f.Messages, Method: f.Method, Series: roundAll(f.Series)}
	if err != nil {
		m.Error = r.redact(err.Error())
	}
	return m
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
	cmd := append([]string{r.java}, jvmOpts...)
	cmd = append(cmd, "-cp", r.classpath, main)
	return append(cmd, args...)
}

// --- Kafka -------------------------------------------------------------

type kafkaVendor struct{}

func (kafkaVendor) fetch() (string, []string) {
	return kafkastack.Version, []string{
		"org.apache.kafka:kafka-tools:" + kafkastack.Version,
		// The tools log through SLF4J 1.7; without a binding they print a
		// warning and nothing else, which is what we want: the NOP binding.
		"org.slf4j:slf4j-nop:1.7.36",
	}
}

func (kafkaVendor) tool() string {
	return "org.apache.kafka:kafka-tools:" + kafkastack.Version + " ProducerPerformance / ConsumerPerformance"
}

// kafkaProducerCmd is ProducerPerformance sending records of size bytes
// into topic at throughput (-1: as fast as it can) with the producer
// properties given, and the client properties file the cluster needs
// (TLS, SASL).
func (r *runner) kafkaProducerCmd(topic string, records int64, size int, throughput string, props ...string) ([]string, error) {
	sec, err := r.kafkaConfigArgs("--producer.config")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--topic", topic, "--num-records", strconv.FormatInt(records, 10), "--record-size", strconv.Itoa(size),
		"--throughput", throughput}, sec...)
	args = append(args, "--producer-props", "bootstrap.servers="+strings.Join(r.Cfg.List(kafkadriver.SettingBrokers), ","))
	return r.javaCmd("org.apache.kafka.tools.ProducerPerformance", append(args, props...)...), nil
}

// kafkaConsumerCmd is ConsumerPerformance reading messages from topic as
// a new group, with the client properties file the cluster needs.
func (r *runner) kafkaConsumerCmd(topic string, messages int64) ([]string, error) {
	sec, err := r.kafkaConfigArgs("--consumer.config")
	if err != nil {
		return nil, err
	}
	return r.javaCmd("org.apache.kafka.tools.ConsumerPerformance", append([]string{
		"--bootstrap-server", strings.Join(r.Cfg.List(kafkadriver.SettingBrokers), ","), "--topic", topic,
		"--messages", strconv.FormatInt(messages, 10), "--group", topic + "-vendor-g", "--timeout", "10000"}, sec...)...), nil
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
		return r.measured(nil, Figure{}, err)
	}
	cmd, err := r.kafkaProducerCmd(topic, 1000000000, kafkadriver.RecordBytes(m), "-1", "acks=all")
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	var covered float64
	out, err := r.runTool(ctx, toolRun{name: "kafka-producer", args: cmd[1:],
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
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParseProducerPerformance(out, r.Warmup)
	return r.measured(cmd, f, err)
}

// consume: one ConsumerPerformance (one consumer client, all partitions)
// reading exactly the topic's messages as a new group from the earliest
// offset.
func (kafkaVendor) consume(ctx context.Context, r *runner, topic string, messages int64) results.Measurement {
	cmd, err := r.kafkaConsumerCmd(topic, messages)
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	out, err := r.runTool(ctx, toolRun{name: "kafka-consumer", args: cmd[1:], timeout: r.MaxDrain + toolSlack})
	if err != nil {
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParseConsumerPerformance(out)
	return r.measured(cmd, f, err)
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

// perfTestCmd is PerfTest with args, the JVM options and flags the URL
// needs (TLS), and the environment that carries the URI (perfTest).
func (r *runner) perfTestCmd(args ...string) (cmd, env []string, err error) {
	jvm, flags, env, err := r.perfTest()
	if err != nil {
		return nil, nil, err
	}
	cmd = r.javaCmd("com.rabbitmq.perf.PerfTest", append(flags, args...)...)
	return append(cmd[:1], append(jvm, cmd[1:]...)...), env, nil
}

// publish: PerfTest producers only, one channel per queue (Producers
// connections × shards/Producers channels), persistent messages, a
// sliding confirm window of Batch unconfirmed messages per channel, and
// the properties and headers the driver's messages carry.
func (rabbitVendor) publish(ctx context.Context, r *runner, topic string) results.Measurement {
	s := r.Shape
	m, err := r.sampleMessage()
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	channels := (s.Shards + s.Producers - 1) / s.Producers
	args := []string{"--producers", strconv.Itoa(s.Producers),
		"--producer-channel-count", strconv.Itoa(channels), "--consumers", "0",
		"--confirm", strconv.Itoa(s.Batch), "--size", strconv.Itoa(s.MessageSize), "--flag", "persistent",
		"--time", strconv.Itoa(int(math.Ceil(r.Duration.Seconds()))), "--id", "calibrate-publish",
		"--message-properties", perfTestProperties(m, time.Now())}
	cmd, env, err := r.perfTestCmd(append(args, r.perfTestQueues(topic)...)...)
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	out, err := r.runTool(ctx, toolRun{name: "rabbitmq-perftest-publish", args: cmd[1:], env: env, timeout: r.Duration + toolSlack})
	if err != nil {
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParsePerfTestPublish(out, r.Warmup)
	return r.measured(cmd, f, err)
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
	args := []string{"--producers", "0", "--consumers", strconv.Itoa(s.Consumers),
		"--consumer-channel-count", strconv.Itoa(channels),
		"--qos", strconv.Itoa(s.Prefetch), "--exit-when", "empty",
		"--time", strconv.Itoa(int(math.Ceil(r.MaxDrain.Seconds()))), "--id", "calibrate-consume"}
	cmd, env, err := r.perfTestCmd(append(args, r.perfTestQueues(topic)...)...)
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	out, err := r.runTool(ctx, toolRun{name: "rabbitmq-perftest-consume", args: cmd[1:], env: env, timeout: r.MaxDrain + toolSlack})
	if err != nil {
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParsePerfTestConsume(out)
	return r.measured(cmd, f, err)
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
	return "org.apache.rocketmq:rocketmq-example:" + RocketMQExampleVersion + " benchmark.BatchProducer / benchmark.Consumer (and benchmark.Producer)"
}

// rocketCmd is one of the benchmark classes with args, its client's logs
// under the stack directory (rocketmq-example 5.5.0 logs to
// ${user.home}/logs/rocketmqlogs/tools_default.log whatever
// rocketmq.client.logRoot says, so user.home is the log directory too),
// the client's TLS options and the ACL options of the configured key
// pair.
func (r *runner) rocketCmd(main string, args ...string) ([]string, error) {
	tlsOpts, err := r.rocketTLS()
	if err != nil {
		return nil, err
	}
	cmd := r.javaCmd("org.apache.rocketmq.example.benchmark."+main, append(args, rocketACL(r.Cfg)...)...)
	jvm := append([]string{"-Drocketmq.client.logRoot=" + r.logDir, "-Drocketmq.client.logLevel=WARN", "-Duser.home=" + r.logDir}, tlsOpts...)
	return append(cmd[:1], append(jvm, cmd[1:]...)...), nil
}

// rocketBatch is BatchProducer's batch and thread count for the shape:
// one thread per queue, as the driver has one sender per queue with one
// request in flight, and as many messages per batch send as the driver's
// publishers have in flight per queue at most (Producers × Batch over
// the queues), so both sides have the same requests and messages in
// flight.
func rocketBatch(s results.Shape) (threads, batch int) {
	return s.Shards, max(1, (s.Producers*s.Batch+s.Shards-1)/s.Shards)
}

// publish: the benchmark BatchProducer (the main publish row: the driver
// sends batches too), rocketBatch's threads each sending one batch at a
// time synchronously to a queue in turn, no key, reporting every second,
// stopped once it has sent for the shape's duration.
func (rocketVendor) publish(ctx context.Context, r *runner, topic string) results.Measurement {
	threads, batch := rocketBatch(r.Shape)
	cmd, err := r.rocketCmd("BatchProducer",
		"-n", strings.Join(r.Cfg.List(rocketdriver.SettingNamesrv), ";"), "-t", topic, "-w", strconv.Itoa(threads),
		"-b", strconv.Itoa(batch), "-s", strconv.Itoa(r.Shape.MessageSize), "-k", "false", "-ri", "1000")
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	out, err := r.runRocketProducer(ctx, "rocketmq-batch-producer", cmd)
	if err != nil {
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParseRocketMQBatchProducer(out, r.Warmup)
	return r.measured(cmd, f, err)
}

// singlePublish: the benchmark Producer, the second publish row: Producers
// threads, each sending one message at a time synchronously (SendSync),
// no key (the default queue selector spreads messages round robin), for
// the shape's duration.
func (rocketVendor) singlePublish(ctx context.Context, r *runner, topic string) results.Measurement {
	cmd, err := r.rocketCmd("Producer",
		"-n", strings.Join(r.Cfg.List(rocketdriver.SettingNamesrv), ";"), "-t", topic, "-w", strconv.Itoa(r.Shape.Producers),
		"-s", strconv.Itoa(r.Shape.MessageSize), "-k", "false", "-ri", "1000")
	out := ""
	if err == nil {
		out, err = r.runRocketProducer(ctx, "rocketmq-producer", cmd)
	}
	m := r.measured(cmd, Figure{}, err)
	if err == nil {
		f, perr := ParseRocketMQProducer(out, r.Warmup)
		m = r.measured(cmd, f, perr)
	}
	m.Tool = "org.apache.rocketmq:rocketmq-example:" + RocketMQExampleVersion + " benchmark.Producer (single synchronous sends)"
	return m
}

// runRocketProducer runs one of the benchmark producers until its report
// lines cover the shape's duration: line k covers seconds k … k+9 after
// launch.
func (r *runner) runRocketProducer(ctx context.Context, name string, cmd []string) (string, error) {
	lines := 0
	return r.runTool(ctx, toolRun{name: name, args: cmd[1:],
		timeout: r.Duration + toolSlack + 10*time.Second,
		until: func(line string) bool {
			if rmqSendRE.MatchString(line) {
				lines++
			}
			return float64(lines+rmqWindow) >= r.Duration.Seconds()
		}})
}

// consume: the benchmark Consumer (a concurrent push consumer with
// Consumers consume threads, a new group, which the broker starts at
// offset 0 of a topic still in its page cache) until its sliding TPS
// window fell back to 0 after the drain.
func (rocketVendor) consume(ctx context.Context, r *runner, topic string, _ int64) results.Measurement {
	cmd, err := r.rocketCmd("Consumer",
		"-n", strings.Join(r.Cfg.List(rocketdriver.SettingNamesrv), ";"), "-t", topic, "-g", topic+"_vendor_g",
		"-w", strconv.Itoa(r.Shape.Consumers), "-ri", "1000")
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	seen := false
	out, err := r.runTool(ctx, toolRun{name: "rocketmq-consumer", args: cmd[1:],
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
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParseRocketMQConsumer(out)
	return r.measured(cmd, f, err)
}

func (kafkaVendor) notes(results.Shape) []string {
	return []string{"ProducerPerformance is one producer client sending without waiting (unbounded in flight up to buffer.memory, linger.ms=5, batch.size=16384), records without key or headers whose value is as large as the driver's key, value and headers together (so both move the same bytes per record); ConsumerPerformance is one consumer client; the producers/consumers counts do not apply to them"}
}

func (rabbitVendor) notes(s results.Shape) []string {
	return []string{fmt.Sprintf("PerfTest keeps a sliding window of %d unconfirmed messages per channel, one channel per queue (%d in flight at most); the driver's publishers each send a batch of %d and wait for all its confirms before the next (%d in flight at most, fewer on average), over one confirm channel per queue that all publishers share", s.Batch, s.Batch*s.Shards, s.Batch, s.Batch*s.Producers),
		"PerfTest's messages carry the driver's properties and headers (content type, message id, key, send time) as constants (--message-properties); without them it publishes about a fifth more messages per second"}
}

func (rocketVendor) notes(s results.Shape) []string {
	threads, batch := rocketBatch(s)
	return []string{
		fmt.Sprintf("benchmark BatchProducer (the publish row): %d threads, each one synchronous batch send of %d messages at a time to a queue in turn, no key, one body for all; the driver's publishers hand their messages to one sender per queue (the key's hash queue), which sends what is buffered as one batch send, one request in flight per queue, so a key's order holds: both sides have %d requests and up to %d messages in flight", threads, batch, threads, threads*batch),
		fmt.Sprintf("benchmark Producer (the single-send row): %d threads, each one synchronous send of one message at a time, no key (round robin over queues)", s.Producers),
		"each benchmark producer's figure is its last 9 s report window (it first reports 10 s after launch)",
		"benchmark Consumer is a concurrent push consumer; the driver's is orderly (a broker lock per queue, one batch of a queue at a time)"}
}

// check: Kafka's tools get what the cluster needs in a client
// properties file (kafkaClientProps), every setting of the driver but
// the server name: the Java client checks the brokers' certificates
// against the host it dials (docs/calibration.md, "Secured clusters").
func (kafkaVendor) check(config.Config) error { return nil }

func (rabbitVendor) check(config.Config) error { return nil }
func (rocketVendor) check(config.Config) error { return nil }
