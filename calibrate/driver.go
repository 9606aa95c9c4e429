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

// driverTool names the driver and its client library (brokers.Info) with
// the version this binary was built with.
func driverTool(broker string) string {
	mod := brokers.InfoOf(broker).Module
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
// the vendor consumers), and no send-time header (a drain has no latency
// to report, and the vendor tools send none).
func (r *runner) options() brokerbench.Options {
	s := r.Shape
	return brokerbench.Options{Size: s.MessageSize, Shards: s.Shards, Batch: s.Batch,
		Publishers: s.Producers, Prefetch: s.Prefetch, MaxBatch: s.MaxBatch, NoLatency: true}.WithDefaults()
}

// sampleMessage is a message as the driver side publishes it (its id from
// the middle of a run): the vendor tools' messages are shaped after it.
func (r *runner) sampleMessage() (brokers.Message, error) {
	o := r.options()
	bodies, err := brokerbench.Bodies(o.Size, 1)
	if err != nil {
		return brokers.Message{}, err
	}
	return brokerbench.Messages{IDPrefix: "calib", Keys: o.Keys, Bodies: bodies}.At(1_000_000, ""), nil
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
	t := brokerbench.Topic{Broker: br, Name: topic}
	limit := brokerbench.Limit{Duration: r.Duration}
	if v, ok := vendors[name].(bounded); ok {
		if limit.Messages, err = v.room(ctx, r); err != nil {
			return err
		}
	}
	pub, err := t.Publish(ctx, "calib", o, limit)
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
	c, err := t.StartConsumer(ctx, topic+"-g", o, pub.Messages)
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
		side.Consume.Method += fmt.Sprintf("; the drain was cut at its limit of %s, so the figure covers what arrived", r.MaxDrain)
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
// unavoidably (the driver's side, then v's); docs/calibration.md explains each.
func shapeNotes(v vendor, s results.Shape) []string {
	acks := "acks one by one"
	if s.MaxBatch > 1 {
		acks = fmt.Sprintf("handler batches of up to %d deliveries (the vendor consumers take one at a time)", s.MaxBatch)
	}
	common := fmt.Sprintf("driver: %d publishers, each sends %d messages with keys and waits for all their confirms before the next call; one subscription, a goroutine or channel per shard, %s", s.Producers, s.Batch, acks)
	return append([]string{common}, v.notes(s)...)
}
