package calibrate

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokerbench"
	"github.com/inboxbench/inboxbench/results"
)

// driverModules are the Go client modules behind each driver.
var driverModules = map[string]string{
	"kafka":    "github.com/twmb/franz-go",
	"rabbitmq": "github.com/rabbitmq/amqp091-go",
	"rocketmq": "github.com/apache/rocketmq-client-go/v2",
}

// driverTool names the driver and its client library with the version
// this binary was built with.
func driverTool(broker string) string {
	mod := driverModules[broker]
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == mod {
				return fmt.Sprintf("inboxbench driver %q (%s %s)", broker, mod, d.Version)
			}
		}
	}
	return fmt.Sprintf("inboxbench driver %q (%s)", broker, mod)
}

// openTopic opens the driver and creates topic with the shape's shards;
// cleanup deletes the topic and closes the driver.
func (r *runner) openTopic(ctx context.Context, name, topic string) (brokers.Broker, func(), error) {
	br, err := brokers.Open(ctx, name, r.Cfg, nil)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := br.Setup(sctx, topic, r.Shape.Shards); err != nil {
		br.Close()
		return nil, nil, fmt.Errorf("%s: create topic %s: %w", name, topic, err)
	}
	return br, func() {
		if d, ok := br.(brokers.TopicDeleter); ok {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := d.DeleteTopic(dctx, topic); err != nil {
				r.say("%-9s could not delete topic %s: %v", name, topic, err)
			}
		}
		br.Close()
	}, nil
}

// options maps the shape onto the driver benchmark: Producers goroutines
// publishing Batch messages per call and waiting for their confirms, one
// subscription (the drivers consume every shard on its own goroutine or
// channel), handler batches of MaxBatch (1 by default: one ack each, like
// the vendor consumers).
func (r *runner) options() brokerbench.Options {
	s := r.Shape
	return brokerbench.Options{Size: s.MessageSize, Shards: s.Shards, Batch: s.Batch,
		Publishers: s.Producers, Prefetch: s.Prefetch, MaxBatch: s.MaxBatch}.WithDefaults()
}

// driverSide publishes for the shape's duration into a fresh topic, then
// drains it with a new group.
func (r *runner) driverSide(ctx context.Context, name string, side *results.SideResult) error {
	topic := uniqueTopic(name, "driver")
	br, cleanup, err := r.openTopic(ctx, name, topic)
	if err != nil {
		return err
	}
	defer cleanup()
	o := r.options()
	r.say("%-9s driver publish for %s", name, r.Duration)
	pub, err := brokerbench.Publish(ctx, br, topic, "calib", o, brokerbench.Limit{Duration: r.Duration})
	side.Publish = results.Measurement{MsgsPerS: pub.RateAfter(r.Warmup), Messages: pub.Messages,
		Method: fmt.Sprintf("confirmed messages per second from %s after the first send to the last confirm (warm-up dropped)", r.Warmup)}
	if pub.Series != nil {
		side.Publish.Series = perSecond(pub.Series)
	}
	if err != nil {
		side.Publish.Error = err.Error()
		return fmt.Errorf("driver publish: %w", err)
	}
	r.say("%-9s driver drain of %d messages", name, pub.Messages)
	c, err := brokerbench.StartConsumer(ctx, br, topic, topic+"-g", o, pub.Messages)
	if err != nil {
		side.Consume.Error = err.Error()
		return fmt.Errorf("driver consume: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.MaxDrain)
	werr := c.Wait(wctx, 30*time.Second)
	cancel()
	res := c.Result()
	_ = c.Close()
	side.Consume = results.Measurement{MsgsPerS: res.Rate(), Messages: res.Messages, Series: perSecond(res.Series),
		Method: fmt.Sprintf("deliveries from the first to the last over that time (subscription start-up of %s left out)", res.Startup.Round(time.Millisecond))}
	if werr != nil {
		side.Consume.Method += fmt.Sprintf("; the drain was cut at --max-drain %s, so the figure covers what arrived", r.MaxDrain)
		if res.Messages == 0 {
			side.Consume.Error = werr.Error()
			return fmt.Errorf("driver consume: %w", werr)
		}
	}
	return nil
}

func perSecond(s *brokerbench.Series) []float64 {
	var out []float64
	for _, v := range s.PerSecond() {
		out = append(out, float64(v))
	}
	return out
}

// shapeNotes say where the vendor tool's shape differs from the driver's
// unavoidably; the README explains each.
func shapeNotes(broker string, s results.Shape) []string {
	acks := "acks one by one"
	if s.MaxBatch > 1 {
		acks = fmt.Sprintf("handler batches of up to %d deliveries (--max-batch: the vendor consumers take one at a time)", s.MaxBatch)
	}
	common := fmt.Sprintf("driver: %d publishers, each sends %d messages with keys and waits for all their confirms before the next call; one subscription, a goroutine or channel per shard, %s", s.Producers, s.Batch, acks)
	switch broker {
	case "kafka":
		return []string{common,
			"ProducerPerformance is one producer client sending without waiting (unbounded in flight up to buffer.memory, linger.ms=5, batch.size=16384), records without key; ConsumerPerformance is one consumer client; the producers/consumers counts do not apply to them"}
	case "rabbitmq":
		return []string{common,
			fmt.Sprintf("PerfTest keeps a sliding window of %d unconfirmed messages per channel, one channel per queue (%d in flight at most); the driver's publishers each send a batch on a confirm channel of their own and wait for all its confirms before the next (%d in flight at most, fewer on average)", s.Batch, s.Batch*s.Shards, s.Batch*s.Producers)}
	case "rocketmq":
		return []string{common,
			fmt.Sprintf("benchmark Producer: %d threads, each one synchronous send at a time, no key (round robin over queues); the driver's publishers send each Publish call's messages of one queue (the key's hash queue) as one synchronous batch send, so a key's order holds", s.Producers),
			fmt.Sprintf("the benchmark Producer runs %d× the duration, so its Consumer's drain lasts long enough to be resolved from its 1 s sliding-window reports; its figure is its last 9 s window", rocketBacklogFactor),
			"benchmark Consumer is a concurrent push consumer; the driver's is orderly (a broker lock per queue, one batch of a queue at a time)"}
	}
	return nil
}
