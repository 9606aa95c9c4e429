package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokerbench"
	kafkadriver "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/results"
)

// Latency at a rate (`bench calibrate --rate`): each side publishes into
// a fresh topic at the same rate and on the same shape for the shape's
// duration, a consumer reading live, and reports its send → confirm and
// publish → consumer latencies over the whole run, as the vendor tools'
// summaries do. The driver's consumer has received a probe message
// before the first measured one, so neither side counts its consumers'
// joining; PerfTest's summary starts once all its producers and
// consumers run.

// rateSide runs one side of one rate in one round.
type rateSide func(ctx context.Context) (results.RateFigures, []string, error)

// atRates measures broker name at every rate of r, Rounds times, the
// side that goes first alternating from round to round.
func (r *runner) atRates(ctx context.Context, name string, v vendor) []results.RateCalibration {
	method, absent, notes := v.rateInfo()
	out := make([]results.RateCalibration, len(r.Rates))
	for i, rate := range r.Rates {
		out[i] = results.RateCalibration{Rate: rate, Notes: notes,
			Vendor: results.RateSide{Tool: v.tool(), Method: method, Absent: absent},
			Driver: results.RateSide{Tool: driverTool(name), Method: driverRateMethod}}
	}
	for round := range r.Rounds {
		for i, rate := range r.Rates {
			rc := &out[i]
			type step struct {
				side *results.RateSide
				run  rateSide
			}
			steps := []step{
				{&rc.Vendor, func(ctx context.Context) (results.RateFigures, []string, error) {
					return r.vendorAtRate(ctx, name, v, rate)
				}},
				{&rc.Driver, func(ctx context.Context) (results.RateFigures, []string, error) {
					f, err := r.driverAtRate(ctx, name, rate)
					return f, nil, err
				}},
			}
			if method == "" {
				steps = steps[1:] // the vendor has no tool at a rate
			} else if !results.VendorFirst(round) {
				steps[0], steps[1] = steps[1], steps[0]
			}
			if r.Rounds > 1 {
				r.say("%-9s round %d of %d at %s msgs/s", name, round+1, r.Rounds, results.FormatRate(rate))
			}
			for k, st := range steps {
				f, cmd, err := st.run(ctx)
				f.First = k == 0
				if err != nil {
					err = errors.New(r.redact(err.Error()))
					f.Error = err.Error()
					if rc.Error == "" {
						rc.Error = err.Error()
					}
				}
				if len(cmd) > 0 && len(st.side.Command) == 0 {
					st.side.Command = r.redactArgs(cmd)
				}
				st.side.Rounds = append(st.side.Rounds, f)
				r.say("%-9s %s at %s msgs/s: achieved %s, publish p50 %s p99 %s, e2e p50 %s p99 %s%s", name, sideName(st.side == &rc.Vendor),
					results.FormatRate(rate), results.FormatRate(f.Achieved), dashMicros(f.PublishP50), dashMicros(f.PublishP99),
					dashMicros(f.E2EP50), dashMicros(f.E2EP99), errText(err))
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	for i := range out {
		out[i].Vendor.Summarize()
		out[i].Driver.Summarize()
	}
	return out
}

func sideName(vendor bool) string {
	if vendor {
		return "vendor"
	}
	return "driver"
}

func dashMicros(v int64) string {
	if v <= 0 {
		return "-"
	}
	return results.FormatMicros(v)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// vendorAtRate runs the vendor tool at rate into a fresh topic.
func (r *runner) vendorAtRate(ctx context.Context, name string, v vendor, rate float64) (results.RateFigures, []string, error) {
	topic := uniqueTopic(name, "vendor-rate")
	_, cleanup, err := r.openTopic(ctx, name, topic)
	if err != nil {
		return results.RateFigures{}, nil, err
	}
	defer cleanup()
	r.say("%-9s vendor at %s msgs/s for %s", name, results.FormatRate(rate), r.Duration)
	return v.atRate(ctx, r, topic, rate)
}

const driverRateMethod = "brokerbench.PublishAtRate: message i due at start + i/rate and handed to PublishAsync then, whatever is unconfirmed (open loop), by the shape's publishers; publish = hand-over → confirm of each call; e2e = each message's due time → the consumer's handler (the publisher's own lag included, lag p99 beside it); a consumer subscribed before, which received a probe message first"

// driverAtRate publishes open loop at rate into a fresh topic for the
// shape's duration (brokerbench.PublishAtRate) while a consumer reads it,
// and returns the latencies.
func (r *runner) driverAtRate(ctx context.Context, name string, rate float64) (results.RateFigures, error) {
	topic := uniqueTopic(name, "driver-rate")
	br, cleanup, err := r.openTopic(ctx, name, topic)
	if err != nil {
		return results.RateFigures{}, err
	}
	defer cleanup()
	o := r.options()
	o.NoLatency = false // the due time rides in SentHeader
	total := int64(rate * r.Duration.Seconds())
	t := brokerbench.Topic{Broker: br, Name: topic}
	c, err := t.StartConsumer(ctx, topic+"-g", o, total+1)
	if err != nil {
		return results.RateFigures{}, err
	}
	defer c.Close()
	if err := r.probe(ctx, br, topic, c); err != nil {
		return results.RateFigures{}, err
	}
	r.say("%-9s driver at %s msgs/s for %s", name, results.FormatRate(rate), r.Duration)
	o.Rate = rate
	res, err := t.PublishAtRate(ctx, "calib", o, brokerbench.Limit{Duration: r.Duration})
	f := results.RateFigures{Messages: res.Messages, PublishP50: res.Confirm.P50, PublishP99: res.Confirm.P99, LagP99: res.Lag.P99}
	if res.Elapsed > 0 {
		f.Achieved = float64(res.Messages) / res.Elapsed.Seconds()
	}
	if err != nil {
		return f, fmt.Errorf("driver publish: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.MaxDrain)
	werr := c.Wait(wctx, 30*time.Second)
	cancel()
	cr := c.Result()
	f.E2EP50, f.E2EP99 = cr.Latency.P50, cr.Latency.P99
	if werr != nil {
		return f, fmt.Errorf("driver consume: %w", werr)
	}
	return f, nil
}

// probe publishes one message without a send time and waits for the
// consumer to receive it: the subscription has joined, and the
// producer's connection and metadata are there, before the measured
// messages.
func (r *runner) probe(ctx context.Context, br brokers.Broker, topic string, c *brokerbench.Consumer) error {
	bodies, err := brokerbench.Bodies(r.Shape.MessageSize, 1)
	if err != nil {
		return err
	}
	m := brokerbench.Messages{IDPrefix: "calib-probe", Keys: 1, Bodies: bodies}.At(0, "")
	if err := brokers.FirstError(br.Publish(ctx, topic, []brokers.Message{m})); err != nil {
		return fmt.Errorf("driver probe publish: %w", err)
	}
	deadline := time.Now().Add(r.MaxDrain)
	for c.Result().Messages == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("driver probe: not delivered within %s", r.MaxDrain)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// --- Kafka ------------------------------------------------------------

// atRate: ProducerPerformance --throughput rate until rate × duration
// records are sent, on the shape's record size, acks=all and linger.ms=0
// (the driver's franz-go producer does not linger; the Java client's
// default of 5 ms would add up to that to every send); its final summary
// has the send → ack percentiles.
func (kafkaVendor) atRate(ctx context.Context, r *runner, topic string, rate float64) (results.RateFigures, []string, error) {
	m, err := r.sampleMessage()
	if err != nil {
		return results.RateFigures{}, nil, err
	}
	n := int64(math.Ceil(rate * r.Duration.Seconds()))
	cmd, err := r.kafkaProducerCmd(topic, n, kafkadriver.RecordBytes(m), strconv.FormatFloat(rate, 'f', -1, 64), "acks=all", "linger.ms=0")
	if err != nil {
		return results.RateFigures{}, nil, err
	}
	out, err := r.runTool(ctx, toolRun{name: "kafka-producer-rate", args: cmd[1:], timeout: r.Duration + toolSlack})
	if err != nil {
		return results.RateFigures{}, cmd, err
	}
	f, err := ParseProducerPerformanceAtRate(out)
	return f, cmd, err
}

func (kafkaVendor) rateInfo() (string, string, []string) {
	return "ProducerPerformance --throughput at the rate, --num-records rate × duration, its final summary: records/sec and send → ack p50/p99 (whole run, the producer's start included, whole milliseconds: under one counts as 0.5 ms)",
		"no end-to-end figure: Kafka's EndToEndLatency sends one message and waits for it before the next, so it measures no rate",
		[]string{"end to end: the reference is the driver's raw consume at this rate (the driver side: its own publisher and consumer, no database), since no Kafka tool measures end to end at a rate",
			"ProducerPerformance runs with linger.ms=0 like the driver's producer (the Java client's default, 5 ms, would add up to that to every send)"}
}

// --- RabbitMQ ---------------------------------------------------------

// atRate: PerfTest with the shape's producers and channels (one per
// queue), each at its share of the rate (PerfTest's --rate is per
// channel), confirms with a window of Batch, and the shape's consumers
// with its prefetch, for the shape's duration; its summary has the
// confirm and consumer latencies.
func (rabbitVendor) atRate(ctx context.Context, r *runner, topic string, rate float64) (results.RateFigures, []string, error) {
	s := r.Shape
	m, err := r.sampleMessage()
	if err != nil {
		return results.RateFigures{}, nil, err
	}
	pch := (s.Shards + s.Producers - 1) / s.Producers
	cch := (s.Shards + s.Consumers - 1) / s.Consumers
	perChannel := rate / float64(s.Producers*pch)
	args := []string{"--producers", strconv.Itoa(s.Producers), "--producer-channel-count", strconv.Itoa(pch),
		"--consumers", strconv.Itoa(s.Consumers), "--consumer-channel-count", strconv.Itoa(cch), "--qos", strconv.Itoa(s.Prefetch),
		"--rate", strconv.FormatFloat(perChannel, 'f', -1, 64), "--confirm", strconv.Itoa(s.Batch),
		"--size", strconv.Itoa(s.MessageSize), "--flag", "persistent",
		"--time", strconv.Itoa(int(math.Ceil(r.Duration.Seconds()))), "--id", "calibrate-rate",
		"--message-properties", perfTestProperties(m, time.Now())}
	cmd, env, err := r.perfTestCmd(append(args, r.perfTestQueues(topic)...)...)
	if err != nil {
		return results.RateFigures{}, nil, err
	}
	out, err := r.runTool(ctx, toolRun{name: "rabbitmq-perftest-rate", args: cmd[1:], env: env, timeout: r.Duration + toolSlack})
	if err != nil {
		return results.RateFigures{}, cmd, err
	}
	f, err := ParsePerfTestAtRate(out)
	return f, cmd, err
}

func (rabbitVendor) rateInfo() (string, string, []string) {
	return "PerfTest producers at the rate (--rate per channel) with confirms and consumers, for the duration; its summary: sending rate, confirm latency (send → confirm) and consumer latency (the send time in each body → the consumer) p50/p99, over the run from when all its producers and consumers started, from a reservoir sample",
		"",
		[]string{"end to end: PerfTest's consumer latency counts from each message's actual send, the driver's from its due time (its publish lag included; lag p99 beside it)"}
}

// --- RocketMQ ---------------------------------------------------------

func (rocketVendor) atRate(context.Context, *runner, string, float64) (results.RateFigures, []string, error) {
	return results.RateFigures{}, nil, errNoRate
}

func (rocketVendor) rateInfo() (string, string, []string) {
	return "", "no rate option: rocketmq-example " + RocketMQExampleVersion + "'s benchmark Producer and BatchProducer send as fast as they can (their options: threads, size, batch, keys, tags, properties, compression, trace, ACL), and its Consumer reports only the average and maximum born → consume time",
		[]string{"the driver side alone: no RocketMQ tool publishes at a rate"}
}
