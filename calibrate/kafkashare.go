package calibrate

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	kafkadriver "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/brokers/kafkashare"
	kafkastack "github.com/inboxbench/inboxbench/compose/kafka"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// --- Kafka share groups ------------------------------------------------

// shareVendor is Kafka's perf tools against the kafka-share driver:
// ProducerPerformance publishes as for the kafka driver (the same
// producer, the same topics), ShareConsumerPerformance drains as a share
// group, from the same kafka-tools artifact.
type shareVendor struct{ kafkaVendor }

func (shareVendor) tool() string {
	return "org.apache.kafka:kafka-tools:" + kafkastack.Version + " ProducerPerformance / ShareConsumerPerformance"
}

// consume: ShareConsumerPerformance with Consumers share consumers (one
// thread each) in a new share group, which the driver set to start at
// the earliest record, reading exactly the topic's messages. Its
// --timeout is the longest a thread may go without a record: a thread
// whose partitions ran dry waits for the others' (the producer spreads
// records unevenly), so it is the drain's bound, not 10 s (a 2-million
// record drain failed with 10 s).
func (shareVendor) consume(ctx context.Context, r *runner, topic string, messages int64) results.Measurement {
	group := topic + "-vendor-g"
	if err := r.shareGroup(ctx, group); err != nil {
		return r.measured(nil, Figure{}, err)
	}
	sec, err := r.kafkaConfigArgs("--command-config")
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	cmd := r.javaCmd("org.apache.kafka.tools.ShareConsumerPerformance", append([]string{
		"--bootstrap-server", strings.Join(r.Cfg.List(kafkadriver.SettingBrokers), ","), "--topic", topic,
		"--num-records", strconv.FormatInt(messages, 10), "--group", group,
		"--threads", strconv.Itoa(r.Shape.Consumers), "--timeout", strconv.FormatInt(r.MaxDrain.Milliseconds(), 10)}, sec...)...)
	out, err := r.runTool(ctx, toolRun{name: "kafka-share-consumer", args: cmd[1:], timeout: r.MaxDrain + toolSlack})
	if err != nil {
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParseShareConsumerPerformance(out)
	return r.measured(cmd, f, err)
}

// shareGroup sets the vendor's share group up as the driver sets its own
// (kafkashare.Broker.ConfigureGroup): a new share group starts at the end
// of the topic unless told otherwise.
func (r *runner) shareGroup(ctx context.Context, group string) error {
	b, err := kafkashare.New(ctx, r.Cfg, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	return b.ConfigureGroup(ctx, group)
}

func (shareVendor) check(config.Config) error { return nil }

func (v shareVendor) notes(s results.Shape) []string {
	return []string{v.kafkaVendor.notes(s)[0],
		fmt.Sprintf("ShareConsumerPerformance is %d share consumers (threads) of one share group, acknowledging implicitly: each poll accepts the records of the one before, which the driver must never let happen before the Handler's verdict; the driver: one subscription (one member) that polls at most Prefetch records, hands each partition's to the Handler on a goroutine of their own, acknowledges every record explicitly after its Handler call, and polls again only then", s.Consumers)}
}
