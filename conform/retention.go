package conform

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

func init() {
	register(&Scenario{
		Name:    "retention-replay",
		Proves:  "the stream is applied, the inbox pruned (retention shorter than the replay window), then old events replayed: version checks keep them from applying again; without them the re-application the article warns of appears",
		Timeout: 3 * time.Minute,
		Catches: []string{"broken-no-version"},
		Outside: inLab,
		Run:     retentionReplay,
	})
}

func retentionReplay(ctx context.Context, c Cell) Outcome {
	spec, err := workload.Parse([]byte("name: retention-replay\nseed: 8\naggregates: 5\nevents: 60\n"))
	if err != nil {
		return fail(err)
	}
	plan := workload.Generate(spec)
	l, topic, err := newTopicLab(ctx, c, nil)
	if err != nil {
		return fail(err)
	}
	defer l.close()
	var handled atomic.Int64
	sub, err := l.b.Subscribe(ctx, topic, "g1", brokers.SubscribeOptions{}, l.applyEach(l.in, l.consumer,
		func(_ context.Context, g got) brokers.Verdict {
			if g.out.Err != nil || g.out.Result == inbox.Gap {
				return brokers.Retry
			}
			handled.Add(1)
			return brokers.Ack
		}))
	if err != nil {
		return fail(fmt.Errorf("%s: subscribe %s: %w", c.Broker, topic, err))
	}
	defer sub.Close()
	wait := func(n int64) error {
		for handled.Load() < n {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d of %d deliveries handled: %w", handled.Load(), n, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	}
	if err := l.publish(ctx, topic, plan.Events...); err != nil {
		return fail(err)
	}
	if err := wait(int64(len(plan.Events))); err != nil {
		return fail(err)
	}
	// Retention shorter than the replay window: the inbox forgets
	// everything, then a third of the stream is replayed from the start.
	pruned, err := inbox.ApplyRetention(ctx, l.pool, l.schema, time.Nanosecond, 1000)
	if err != nil {
		return fail(err)
	}
	replay := plan.Events[:len(plan.Events)/3]
	if err := l.publish(ctx, topic, replay...); err != nil {
		return fail(err)
	}
	if err := wait(int64(len(plan.Events) + len(replay))); err != nil {
		return fail(err)
	}
	out, err := l.check(ctx, plan.Events, plan.Expected)
	if err != nil {
		return fail(err)
	}
	// The prune removed inbox rows of events that did take effect: here
	// that is the fault itself, not an anomaly.
	if n := out.Anomalies[runner.EffectWithoutInbox]; n > 0 {
		delete(out.Anomalies, runner.EffectWithoutInbox)
		delete(out.Examples, runner.EffectWithoutInbox)
	}
	out.Notes = append(out.Notes, fmt.Sprintf("pruned %d inbox rows, replayed %d events", pruned.Rows, len(replay)))
	out.Verdict = verdict(out.Anomalies)
	return out
}
