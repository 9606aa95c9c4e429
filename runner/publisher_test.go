package runner

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/workload"
)

// lateBroker confirms each PublishAsync call after a random delay, so
// calls complete out of order, and fails each message's first send with
// probability failFirst.
type lateBroker struct {
	brokers.Broker // only Name is used
	mu             sync.Mutex
	order          map[string][]int64 // per key, the versions in hand-over order
	tries          map[string]int
	calls, fails   int
	failFirst      float64
	rng            *rand.Rand
	inflight, most int
}

func (b *lateBroker) Name() string { return "late" }

func (b *lateBroker) PublishAsync(_ context.Context, _ string, msgs []brokers.Message, done func([]error)) {
	b.mu.Lock()
	b.calls++
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		b.tries[m.ID]++
		if b.tries[m.ID] == 1 && b.rng.Float64() < b.failFirst {
			errs[i] = errors.New("refused once")
			b.fails++
			continue
		}
		b.order[m.Key] = append(b.order[m.Key], int64(len(b.order[m.Key])))
	}
	b.inflight++
	b.most = max(b.most, b.inflight)
	delay := time.Duration(b.rng.IntN(3000)) * time.Microsecond
	b.mu.Unlock()
	go func() {
		time.Sleep(delay)
		b.mu.Lock()
		b.inflight--
		b.mu.Unlock()
		done(errs)
	}()
}

func publisherSpec(t *testing.T, rate float64) *workload.Spec {
	t.Helper()
	s := workload.Defaults()
	s.Aggregates, s.Events, s.Publishers, s.MessageSize, s.PublishRate = 20, 2000, 4, 128, rate
	return &s
}

// TestPublisherDoesNotWaitForConfirms: at a rate, calls overlap (the
// publisher hands messages over at their time while earlier ones are
// unconfirmed), every message is confirmed once in the end, failed
// messages are sent again with the same ids, and each key's first sends
// leave in plan order.
func TestPublisherDoesNotWaitForConfirms(t *testing.T) {
	spec := publisherSpec(t, 4000)
	plan := workload.Generate(spec)
	b := &lateBroker{order: map[string][]int64{}, tries: map[string]int{}, failFirst: 0.05, rng: rand.New(rand.NewPCG(1, 2))}
	tl := newTally(true, RetryBound{}, len(plan.Publishes))
	f := planFeed(plan, spec.Publishers)
	p := newPublisher(&cell{b: b, id: "t", t: tl, notes: &notes{}}, f, spec)
	if err := p.run(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got, complete := f.published()
	if !complete || len(got.Events) != len(plan.Events) {
		t.Fatalf("published %d of %d events (complete %v)", len(got.Events), len(plan.Events), complete)
	}
	if n := tl.c.published.Load(); n != int64(len(plan.Publishes)) {
		t.Errorf("%d confirmed, want %d", n, len(plan.Publishes))
	}
	if b.fails == 0 || tl.c.publishRetries.Load() == 0 {
		t.Errorf("no failure was retried: %d fails, %d retries", b.fails, tl.c.publishRetries.Load())
	}
	for id, n := range b.tries {
		if n > 2 {
			t.Errorf("%s sent %d times; a message fails once here", id, n)
		}
	}
	if b.most < 2 {
		t.Errorf("at most %d call in flight: the publisher waited for confirms", b.most)
	}
	if lag := p.lagSummary(); lag.Count != int64(len(plan.Publishes)) {
		t.Errorf("publish lag recorded for %d messages, want %d", lag.Count, len(plan.Publishes))
	}
}

// TestPublisherKeepsKeyOrder: without failures, every key's messages
// reach the broker in plan order although calls complete out of order.
func TestPublisherKeepsKeyOrder(t *testing.T) {
	spec := publisherSpec(t, 0)
	plan := workload.Generate(spec)
	b := &orderBroker{seen: map[string][]string{}}
	tl := newTally(true, RetryBound{}, len(plan.Publishes))
	p := newPublisher(&cell{b: b, id: "t", t: tl, notes: &notes{}}, planFeed(plan, spec.Publishers), spec)
	if err := p.run(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, pub := range plan.Publishes {
		want[pub.OrderingKey()] = append(want[pub.OrderingKey()], pub.Event.Key())
	}
	for k, ids := range want {
		got := b.seen[k]
		if len(got) != len(ids) {
			t.Fatalf("key %s: %d messages, want %d", k, len(got), len(ids))
		}
		for i := range ids {
			if got[i] != ids[i] {
				t.Fatalf("key %s: message %d is %s, want %s", k, i, got[i], ids[i])
			}
		}
	}
}

type orderBroker struct {
	brokers.Broker
	mu   sync.Mutex
	seen map[string][]string
	n    int
}

func (b *orderBroker) Name() string { return "order" }

func (b *orderBroker) PublishAsync(_ context.Context, _ string, msgs []brokers.Message, done func([]error)) {
	b.mu.Lock()
	for _, m := range msgs {
		b.seen[m.Key] = append(b.seen[m.Key], m.ID)
	}
	b.n++
	delay := time.Duration(b.n%7) * 300 * time.Microsecond
	b.mu.Unlock()
	go func() { time.Sleep(delay); done(make([]error, len(msgs))) }()
}
