package conform

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// The article's four experiments, through a real broker: each starts from
// order-42 at balance 0, version 0 and consumer balance-v1 with an empty
// inbox (a fresh schema per cell), and prints the article's line.
func init() {
	redelivery := func(name, proves string, catches []string, failUpdate bool) *Scenario {
		return &Scenario{Name: name, Proves: proves, Timeout: 2 * time.Minute, Catches: catches, Outside: inLab,
			Run: func(ctx context.Context, c Cell) Outcome { return redeliveryExperiment(ctx, c, failUpdate) }}
	}
	register(redelivery("duplicate", "the article's duplicate experiment: commit, close without ack, the same event comes back and is skipped (balance=10 inbox=1)",
		nil, false))
	register(redelivery("split", "the business update fails after the inbox claim: a correct inbox rolls the claim back so the redelivery applies; a split commit keeps it and swallows the change (balance=0 inbox=1)",
		[]string{"broken-split"}, true))
	register(&Scenario{
		Name:    "concurrent",
		Proves:  "two consumers, each with its own connection, race one event: the primary key lets exactly one apply (applied=1 duplicate=1 balance=10 inbox=1)",
		Timeout: 2 * time.Minute,
		Catches: []string{"broken-check-then-insert"},
		Outside: inLab,
		Run:     concurrentExperiment,
	})
	register(&Scenario{
		Name:    "order",
		Proves:  "versions: a gap is rejected and recovers once its predecessor applies, a repeat is a duplicate, an old version under a new id is stale (balance=30 inbox=2)",
		Timeout: 2 * time.Minute,
		Catches: []string{"broken-no-version", "broken-aggregate-key"},
		Outside: inLab,
		Run:     orderExperiment,
	})
}

// inLab is why a lab scenario cannot judge a service under test.
const inLab = "drives the strategy's SQL step by step inside bench (a lab of its own): a service under test is seen from outside only"

// redeliveryExperiment: publish one persistent, confirmed message; the
// consumer applies it and dies before acking (split: the business update
// fails first); a new consumer gets it again and applies it again.
func redeliveryExperiment(ctx context.Context, c Cell, failUpdate bool) Outcome {
	name := c.Scenario
	var once sync.Once
	l, topic, err := newTopicLab(ctx, c, func(o *inbox.Options) {
		if failUpdate {
			// The business update of the first attempt fails (the article
			// rolls it back); strategies without a step between claim
			// and update (cte, batch, pipeline) never call the hook.
			o.BeforeEffect = func(context.Context, string, *envelope.Event) error {
				err := error(nil)
				once.Do(func() { err = inbox.ErrInjected })
				return err
			}
		}
	})
	if err != nil {
		return fail(err)
	}
	defer l.close()
	ev := event("event-"+name, 1, 10)
	if err := l.publish(ctx, topic, ev); err != nil {
		return fail(err)
	}
	r := newReader(topic, 4)
	// First delivery: the transaction ran (committed, or failed and rolled
	// back); the consumer dies before the ack either way.
	sub, err := l.consume(ctx, r, func(n int, g got) brokers.Verdict {
		if n == 1 {
			return brokers.Crash
		}
		return brokers.Ack
	})
	if err != nil {
		return fail(err)
	}
	first, err := r.next(ctx, "the first delivery")
	if err != nil {
		sub.Close()
		return fail(err)
	}
	select {
	case <-sub.Done():
	case <-ctx.Done():
		return fail(fmt.Errorf("the crashed subscription did not end: %w", ctx.Err()))
	}
	sub, err = l.consume(ctx, r, func(int, got) brokers.Verdict { return brokers.Ack })
	if err != nil {
		return fail(err)
	}
	defer sub.Close()
	second, err := r.next(ctx, "the redelivery")
	if err != nil {
		return fail(errors.Join(errNotRedelivered, err))
	}
	// Kafka and RocketMQ have no redelivered flag: the same event id
	// arriving again is the equivalent signal.
	redelivered := second.d.Redelivered || (second.ev.Key() == first.ev.Key() && !l.b.Capabilities().RedeliveryFlag)
	skipped := second.out.Result == inbox.Duplicate
	out, bal, rows, err := l.settled(ctx, []*envelope.Event{ev}, workload.State{Balance: 10, Version: 1})
	if err != nil {
		return fail(err)
	}
	out.Line = fmt.Sprintf("%s: redelivered=%t duplicateSkipped=%t balance=%d inbox=%d", name, redelivered, skipped, bal, rows)
	if !redelivered {
		out.Anomalies[LostDelivery]++
		out.Verdict = verdict(out.Anomalies)
	}
	if !l.b.Capabilities().RedeliveryFlag {
		out.Notes = append(out.Notes, c.Broker+" has no redelivered flag: redelivered means the same event id came back")
	}
	return out
}

// LostDelivery is counted when an unacknowledged delivery never came back.
const LostDelivery = "lost-delivery"

// concurrentExperiment: the same event reaches two consumers at once (two
// topics, one subscription each); both wait at one barrier, then apply on
// their own connections.
func concurrentExperiment(ctx context.Context, c Cell) Outcome {
	l, err := newLab(ctx, c, func(o *inbox.Options) { o.BeforeEffect = pairUp() })
	if err != nil {
		return fail(err)
	}
	defer l.close()
	ev := event("same-event", 1, 10)
	results := make(chan inbox.Outcome, 2)
	pol := runner.NewErrorPolicy(runner.RetryBound{})
	subs, err := l.race(ctx, ev, pol, results)
	defer func() {
		for _, s := range subs {
			s.Close()
		}
	}()
	if err != nil {
		return fail(err)
	}
	applied, dup := 0, 0
	for range 2 {
		select {
		case r := <-results:
			switch r.Result {
			case inbox.Applied:
				applied++
			case inbox.Duplicate:
				dup++
			}
		case <-ctx.Done():
			return fail(fmt.Errorf("waiting for both consumers: %w", ctx.Err()))
		}
	}
	if err := deadLettered(pol); err != nil {
		return fail(err)
	}
	out, bal, rows, err := l.settled(ctx, []*envelope.Event{ev}, workload.State{Balance: 10, Version: 1})
	if err != nil {
		return fail(err)
	}
	out.Line = fmt.Sprintf("concurrent: applied=%d duplicate=%d balance=%d inbox=%d", applied, dup, bal, rows)
	if applied != 1 || dup != 1 {
		out.Anomalies[DuplicateClaim]++
		out.Examples[DuplicateClaim] = []string{fmt.Sprintf("%d consumers believed they were first", applied)}
		out.Verdict = verdict(out.Anomalies)
	}
	return out
}

// pairUp is the concurrent experiment's BeforeEffect. Between the claim
// (or the check) and the update, each applier waits for the other, up to
// a second: two check-then-insert consumers have then both checked
// before either inserts, however the machine schedules them (a fixed
// 100 ms pause let a loaded machine serialize them). A correct strategy's
// second claim waits on the first's row instead, so the first goes on
// alone after the second.
func pairUp() func(context.Context, string, *envelope.Event) error {
	var mu sync.Mutex
	arrived, both := 0, make(chan struct{})
	return func(ctx context.Context, _ string, _ *envelope.Event) error {
		mu.Lock()
		if arrived++; arrived == 2 {
			close(both)
		}
		mu.Unlock()
		select {
		case <-both:
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		return nil
	}
}

// race publishes ev to two topics of the cell, one consumer subscribed to
// each: both wait at one barrier, then apply ev on their own connections
// and report what they decided on results. It returns the subscriptions
// made, also on an error.
func (l *lab) race(ctx context.Context, ev *envelope.Event, pol *runner.ErrorPolicy, results chan<- inbox.Outcome) ([]brokers.Subscription, error) {
	barrier := newBarrier(2)
	var subs []brokers.Subscription
	for i, suffix := range []string{"-a", "-b"} {
		topic, err := l.topic(ctx, suffix)
		if err != nil {
			return subs, err
		}
		if err := l.publish(ctx, topic, ev); err != nil {
			return subs, err
		}
		h := brokers.PerDelivery(func(hctx context.Context, d *brokers.Delivery) brokers.Verdict {
			delivered, err := envelope.Unmarshal(d.Body)
			if err != nil {
				return brokers.Reject
			}
			if !barrier.wait(hctx, 30*time.Second) {
				return brokers.Retry
			}
			outs, _ := l.st.ApplyBatch(hctx, l.in, l.consumer, []*envelope.Event{delivered})
			v := brokers.Ack
			if outs[0].Err != nil || outs[0].Result == inbox.Gap {
				var final bool
				if v, final = undecided(hctx, pol, got{d: d, ev: delivered, out: outs[0]}); !final {
					return v
				}
			}
			select {
			case results <- outs[0]:
			case <-hctx.Done():
			}
			return v
		})
		sub, err := l.b.Subscribe(ctx, topic, fmt.Sprintf("g%d", i), brokers.SubscribeOptions{Prefetch: 1}, h)
		if err != nil {
			return subs, fmt.Errorf("%s: subscribe %s: %w", l.broker, topic, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// DuplicateClaim is counted when two racing consumers did not end as one
// APPLIED and one DUPLICATE ("two consumers both think they are first").
const DuplicateClaim = "duplicate-claim"

// orderExperiment (parking off, as in the article): event-2 first is a gap
// and leaves nothing; event-1 applies; event-2 again applies; event-2 once
// more is a duplicate; a new id carrying version 1 is stale.
func orderExperiment(ctx context.Context, c Cell) Outcome {
	l, topic, err := newTopicLab(ctx, c, func(o *inbox.Options) { o.DisableParking = true })
	if err != nil {
		return fail(err)
	}
	defer l.close()
	rd := newReader(topic, 8)
	// The article rejects the gap and replays event-2 later: the consumer
	// answers every decision with an ack and the test publishes the replay.
	sub, err := l.consume(ctx, rd, func(int, got) brokers.Verdict { return brokers.Ack })
	if err != nil {
		return fail(err)
	}
	defer sub.Close()
	e1, e2, stale := event("event-1", 1, 10), event("event-2", 2, 20), event("stale-copy", 1, 10)
	step := func(ev *envelope.Event) (inbox.Result, error) {
		if err := l.publish(ctx, topic, ev); err != nil {
			return 0, err
		}
		g, err := rd.next(ctx, ev.ID)
		if err != nil {
			return 0, err
		}
		if g.out.Err != nil {
			return 0, g.out.Err
		}
		return g.out.Result, nil
	}
	r, err := step(e2)
	if err != nil {
		return fail(err)
	}
	_, _, rows0, err := l.state(ctx, "order-42")
	if err != nil {
		return fail(err)
	}
	gapRejected := r == inbox.Gap && rows0 == 0
	if _, err := step(e1); err != nil {
		return fail(err)
	}
	if _, err := step(e2); err != nil {
		return fail(err)
	}
	_, recovered, _, err := l.state(ctx, "order-42")
	if err != nil {
		return fail(err)
	}
	r, err = step(e2)
	if err != nil {
		return fail(err)
	}
	dupSkipped := r == inbox.Duplicate
	r, err = step(stale)
	if err != nil {
		return fail(err)
	}
	staleRejected := r == inbox.Stale
	out, bal, rows, err := l.settled(ctx, []*envelope.Event{e1, e2}, workload.State{Balance: 30, Version: 2})
	if err != nil {
		return fail(err)
	}
	out.Line = fmt.Sprintf("order: gapRejected=%t recoveredVersion=%d duplicateSkipped=%t staleRejected=%t balance=%d inbox=%d",
		gapRejected, recovered, dupSkipped, staleRejected, bal, rows)
	if !gapRejected || !staleRejected || !dupSkipped {
		out.Anomalies[OrderViolated]++
		out.Examples[OrderViolated] = []string{out.Line}
		out.Verdict = verdict(out.Anomalies)
	}
	return out
}

// OrderViolated is counted when the order experiment's decisions differ
// from the article's (a gap or a stale event accepted, a repeat applied).
const OrderViolated = "order-violated"

// barrier releases its waiters once n have arrived.
type barrier struct {
	mu   sync.Mutex
	n    int
	open chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) wait(ctx context.Context, limit time.Duration) bool {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
		return true
	case <-ctx.Done():
	case <-time.After(limit):
	}
	return false
}
