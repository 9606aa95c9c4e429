package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
)

// batchProbe is the BatchDelivery handler: it checks the shape of every
// batch, feeds the deliveries to a Collector, and answers Retry once in
// the middle of a batch, then checks what comes back.
type batchProbe struct {
	maxBatch int
	c        *Collector
	// inPlace: the driver retries in place (PerKeyOrder), so the retried
	// delivery heads the shard's next batch. A driver without per-key
	// order may hand it back to the broker instead, which delivers it
	// again later, as a redelivery.
	inPlace bool

	mu      sync.Mutex
	calls   int
	multi   int // calls with more than one delivery
	largest int
	bad     []string // batch shape violations

	injected bool
	// retryShard, retryIDs: the shard and ids (from the Retry on) of the
	// batch that got the Retry, until its redelivery was checked.
	retryShard string
	retryIDs   []string
	retryCheck bool // the redelivery was seen and checked
}

func (p *batchProbe) failf(format string, args ...any) {
	if len(p.bad) < maxListed {
		p.bad = append(p.bad, fmt.Sprintf(format, args...))
	}
}

// shape checks that ds is one shard's deliveries, in order (per key, the
// versions increase), within MaxBatch. Caller holds p.mu.
func (p *batchProbe) shape(ds []*brokers.Delivery) {
	p.calls++
	p.largest = max(p.largest, len(ds))
	if len(ds) > 1 {
		p.multi++
	}
	if len(ds) == 0 || len(ds) > p.maxBatch {
		p.failf("a batch of %d deliveries (MaxBatch %d)", len(ds), p.maxBatch)
		return
	}
	last := map[string]int64{}
	for _, d := range ds {
		if d.Shard != ds[0].Shard {
			p.failf("one batch mixes shards %q (%s) and %q (%s)", ds[0].Shard, ds[0].ID, d.Shard, d.ID)
		}
		ev, err := envelope.Unmarshal(d.Body)
		if err != nil {
			continue // the Collector reports it
		}
		if v, ok := last[d.Key]; ok && ev.AggregateVersion <= v {
			p.failf("batch out of shard order: %s after v%d of its key", d.ID, v)
		}
		last[d.Key] = ev.AggregateVersion
	}
}

// redelivery checks the first call on the retried shard after the Retry:
// it must start with the retried delivery and go on with what followed
// it, in the same order (what came before it in its batch was acked and
// must not come back). Caller holds p.mu.
func (p *batchProbe) redelivery(ds []*brokers.Delivery) {
	target := p.retryIDs[0]
	j := -1
	for i, d := range ds {
		if d.ID == target {
			j = i
			break
		}
	}
	if !p.inPlace {
		p.redelivered(ds, j)
		return
	}
	p.retryCheck = true
	if j < 0 {
		p.failf("after a Retry of %s the next batch of shard %s does not hold it (first %s)", target, p.retryShard, ds[0].ID)
		return
	}
	if j > 0 {
		p.failf("after a Retry of %s the next batch of shard %s starts with %d deliveries before it (first %s): the acked prefix came back", target, p.retryShard, j, ds[0].ID)
	}
	for k := 0; k < len(p.retryIDs) && j+k < len(ds); k++ {
		if ds[j+k].ID != p.retryIDs[k] {
			p.failf("after a Retry of %s the batch continues with %s where %s was (order changed)", target, ds[j+k].ID, p.retryIDs[k])
			break
		}
	}
	if ds[j].Attempt < 2 {
		p.failf("the retried %s came back with Attempt %d, want ≥ 2", target, ds[j].Attempt)
	}
}

// redelivered checks the retried delivery's return to a driver that
// does not retry in place: in some later batch of its shard (ds holds it
// at j, or not yet: j < 0), as a redelivery.
func (p *batchProbe) redelivered(ds []*brokers.Delivery, j int) {
	if j < 0 {
		return
	}
	p.retryCheck = true
	if d := ds[j]; d.Attempt < 2 && d.DeliveryCount < 2 && !d.Redelivered {
		p.failf("the retried %s came back with Attempt %d, DeliveryCount %d, not redelivered", d.ID, d.Attempt, d.DeliveryCount)
	}
}

func (p *batchProbe) handle(ctx context.Context, ds []*brokers.Delivery) []brokers.Verdict {
	p.mu.Lock()
	p.shape(ds)
	if p.retryShard != "" && !p.retryCheck && len(ds) > 0 && ds[0].Shard == p.retryShard {
		p.redelivery(ds)
	}
	retryAt := -1
	if !p.injected && len(ds) >= 3 {
		p.injected = true
		retryAt = len(ds) / 2
		p.retryShard = ds[0].Shard
		for _, d := range ds[retryAt:] {
			p.retryIDs = append(p.retryIDs, d.ID)
		}
	}
	p.mu.Unlock()

	vs := make([]brokers.Verdict, len(ds))
	for i, d := range ds {
		if i == retryAt {
			vs[i] = brokers.Retry
			// Ack for the rest, unrecorded: the contract says nothing after
			// a Retry may be acked ahead of it, so a driver that did would
			// lose these and WaitAll would name them.
			for j := i + 1; j < len(ds); j++ {
				vs[j] = brokers.Ack
			}
			break
		}
		vs[i] = p.c.Handle(ctx, d)
	}
	return vs
}

// batches of up to MaxBatch deliveries hold one shard's deliveries in
// order, some hold more than one, everything arrives (in per-key order
// where claimed), and a Retry in the middle of a batch re-delivers from
// that point on (in place where the driver claims per-key order; later,
// as a redelivery, where it does not).
func testBatchDelivery(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	caps := b.Capabilities()
	topic := Topic(t, b, 4)
	msgs := Events(t, UniqueName(t, "e"), 8, 250, 0)
	const maxBatch = 100
	p := &batchProbe{maxBatch: maxBatch, c: NewCollector(b.Name(), msgs), inPlace: caps.PerKeyOrder}
	// Published before subscribing, so batches have something to take.
	Publish(t, b, topic, msgs, publishTimeout)
	opts := brokers.SubscribeOptions{MaxBatch: maxBatch}
	sub := subscribe(t, b, topic, UniqueName(t, "g"), opts, p.handle)
	p.c.WaitAll(t, waitTimeout)
	p.c.Check(t, caps.PerKeyOrder)

	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("%s: %d handler calls for %d events, %d with more than one delivery, largest %d", b.Name(), p.calls, len(msgs), p.multi, p.largest)
	if len(p.bad) > 0 {
		t.Errorf("%s: batch violations: %s", b.Name(), list(p.bad))
	}
	if p.multi == 0 {
		t.Errorf("%s: with MaxBatch %d and %d events already published, every handler call got one delivery", b.Name(), maxBatch, len(msgs))
	}
	switch {
	case !p.injected:
		t.Errorf("%s: no batch of 3 or more deliveries, so the mid-batch Retry was never tested", b.Name())
	case !p.retryCheck:
		t.Errorf("%s: the batch retried at %s never came back to shard %s", b.Name(), p.retryIDs[0], p.retryShard)
	}
	if st := sub.Stats(); st.Retried < 1 {
		t.Errorf("%s: Stats().Retried = %d after a Retry verdict", b.Name(), st.Retried)
	}
}

// a Crash verdict anywhere in a batch acknowledges nothing of it: the
// deliveries the handler answered Ack in the crashing batch come back to
// the next subscription too.
func testBatchCrash(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	topic := Topic(t, b, 2)
	group := UniqueName(t, "g")
	msgs := Events(t, UniqueName(t, "e"), 4, 50, 0)
	c := NewCollector(b.Name(), msgs)
	Publish(t, b, topic, msgs, publishTimeout)
	opts := brokers.SubscribeOptions{MaxBatch: 50}
	per := brokers.PerDelivery(c.Handle)
	var (
		mu      sync.Mutex
		crashed []string
	)
	h := func(ctx context.Context, ds []*brokers.Delivery) []brokers.Verdict {
		mu.Lock()
		first := crashed == nil && len(ds) >= 2
		if first {
			for _, d := range ds {
				crashed = append(crashed, d.ID)
			}
		}
		mu.Unlock()
		if !first {
			return per(ctx, ds)
		}
		// "Committed" all but the last, then died: not recorded in the
		// Collector, so WaitAll below proves they were redelivered.
		vs := make([]brokers.Verdict, len(ds))
		vs[len(vs)-1] = brokers.Crash
		return vs
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	sub, err := b.Subscribe(ctx, topic, group, opts, h)
	if err != nil {
		t.Fatalf("%s: subscribe: %v", b.Name(), err)
	}
	select {
	case <-sub.Done():
	case <-time.After(waitTimeout):
		_ = sub.Close()
		t.Fatalf("%s: no crash within %v: no handler call got 2 or more deliveries (MaxBatch %d, %d events already published)", b.Name(), waitTimeout, opts.MaxBatch, len(msgs))
	}
	if !errors.Is(sub.Err(), brokers.ErrCrashed) {
		t.Fatalf("%s: after a Crash verdict in a batch Err() = %v, want ErrCrashed", b.Name(), sub.Err())
	}
	if err := sub.Close(); err != nil {
		t.Errorf("%s: Close after crash: %v", b.Name(), err)
	}
	subscribe(t, b, topic, group, opts, per)
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)
	t.Logf("%s: a batch of %d crashed and came back", b.Name(), len(crashed))
}

// a handler that crashes on its very first call, while the subscription
// may still be starting its other shards, ends the subscription with
// ErrCrashed; Subscribe itself never fails because of it (the caller has
// no Subscription to read the crash from then), and the next subscription
// of the group gets every event. Many shards, each with a backlog, widen
// the window between the first delivery and the last shard's start.
func testCrashWhileStarting(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	const shards = 16
	topic := Topic(t, b, shards)
	msgs := Events(t, UniqueName(t, "e"), shards, 20, 0)
	c := NewCollector(b.Name(), msgs)
	Publish(t, b, topic, msgs, publishTimeout)
	opts := brokers.SubscribeOptions{MaxBatch: 10}
	crash := func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict { return crashAll(ds) }
	group := UniqueName(t, "g")
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		sub, err := b.Subscribe(ctx, topic, group, opts, crash)
		cancel()
		if err != nil {
			t.Fatalf("%s: Subscribe failed when its handler crashed on the first call: %v (want a Subscription whose Err() is ErrCrashed)", b.Name(), err)
		}
		waitDone(t, b, sub, waitTimeout)
		if !errors.Is(sub.Err(), brokers.ErrCrashed) {
			t.Fatalf("%s: after a Crash on the first call Err() = %v, want ErrCrashed", b.Name(), sub.Err())
		}
		if err := sub.Close(); err != nil {
			t.Errorf("%s: Close after crash: %v", b.Name(), err)
		}
	}
	subscribe(t, b, topic, group, opts, brokers.PerDelivery(c.Handle))
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)
}
