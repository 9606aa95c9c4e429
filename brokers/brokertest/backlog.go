package brokertest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// The crash-with-backlog fault (brokers.HoldForBacklog), the one conform's
// crash-with-backlog scenario injects: a consumer's first Handler call
// holds its batch, unhandled, until the subscription holds a backlog
// beyond it, then crashes. A correct driver redelivers all it held
// (CrashWithBacklog); the same driver with SettleOnReceipt, the
// transport's negative control, loses exactly what it held
// (SettleOnReceiptLosesBacklog): a driver whose negative control loses
// nothing does not implement it, and conform's transport controls would
// pass where they must fail.

func testCrashWithBacklog(t *testing.T, newBroker NewBroker) { crashWithBacklog(t, newBroker, false) }

func testSettleOnReceipt(t *testing.T, newBroker NewBroker) { crashWithBacklog(t, newBroker, true) }

// backlogCrash is the handler of the consumer that dies: its first call
// holds for a backlog and crashes; the others (other shards, meanwhile)
// handle nothing, wait for that crash and crash too, as the runner's
// dying consumer does (runner/handler.go, dead). Were they handled, the
// backlog would hang on how the transport spreads a fetch over shards:
// Kafka share groups poll no more until every record of the last poll has
// its verdict, so a poll of 14 records of the held shard and 50 of the
// other left a backlog of 4 beyond the batch, never the 10 it waits for.
type backlogCrash struct {
	opts brokers.SubscribeOptions
	sub  atomic.Value // brokers.Subscription, once Subscribe returned

	dying atomic.Bool
	died  chan struct{} // closed when the first call returns its Crash
	mu    sync.Mutex
	held  brokers.Backlog
	ids   []string // the batch in the held call's hands
}

// crashAll is a Crash verdict for each of ds.
func crashAll(ds []*brokers.Delivery) []brokers.Verdict {
	vs := make([]brokers.Verdict, len(ds))
	for i := range vs {
		vs[i] = brokers.Crash
	}
	return vs
}

func (h *backlogCrash) stats() brokers.Stats {
	if s, ok := h.sub.Load().(brokers.Subscription); ok {
		return s.Stats()
	}
	return brokers.Stats{}
}

func (h *backlogCrash) handle(ctx context.Context, ds []*brokers.Delivery) []brokers.Verdict {
	if !h.dying.CompareAndSwap(false, true) {
		<-h.died
		return crashAll(ds)
	}
	defer close(h.died)
	held := brokers.HoldForBacklog(ctx, h.stats, len(ds), h.opts)
	h.mu.Lock()
	h.held = held
	for _, d := range ds {
		h.ids = append(h.ids, d.ID)
	}
	h.mu.Unlock()
	return crashAll(ds)
}

// crashWithBacklog crashes a consumer holding a backlog, then consumes
// the rest with a correct one of the same group: everything arrives, or,
// when the dead one settled on receipt (early), everything but what it
// held.
func crashWithBacklog(t *testing.T, newBroker NewBroker, early bool) {
	b := newBroker(t)
	if b.Capabilities().Baseline {
		t.Skipf("%s has no transport: nothing is received ahead of the Handler, so no consumer holds a backlog", b.Name())
	}
	topic := Topic(t, b, 2)
	group := UniqueName(t, "g")
	msgs := Events(t, UniqueName(t, "e"), 8, 25, 0)
	c := NewCollector(b.Name(), msgs)
	Publish(t, b, topic, msgs, publishTimeout)
	opts := brokers.SubscribeOptions{MaxBatch: 10}
	per := brokers.PerDelivery(c.Handle)
	h := &backlogCrash{opts: opts, died: make(chan struct{})}
	h.opts.SettleOnReceipt = early
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	first, err := b.Subscribe(ctx, topic, group, h.opts, h.handle)
	if err != nil {
		t.Fatalf("%s: subscribe: %v", b.Name(), err)
	}
	h.sub.Store(first)
	waitDone(t, b, first, waitTimeout+brokers.BacklogMaxHold)
	if !errors.Is(first.Err(), brokers.ErrCrashed) {
		t.Fatalf("%s: after a Crash verdict Err() = %v, want ErrCrashed", b.Name(), first.Err())
	}
	st := first.Stats()
	h.mu.Lock()
	held, ids := h.held, h.ids
	h.mu.Unlock()
	if !held.Reached {
		t.Fatalf("%s: the dying consumer never held a backlog beyond its batch: %+v (stats %+v)", b.Name(), held, st)
	}
	lost := int(st.Outstanding()) // what it had received and not settled when it died
	t.Logf("%s: died holding %d deliveries, %d in its handler (stats when it ended: %+v)", b.Name(), held.Held, held.Batch, st)
	subscribe(t, b, topic, group, opts, per)
	if !early {
		c.WaitAll(t, waitTimeout)
		c.Check(t, b.Capabilities().PerKeyOrder)
		return
	}
	c.WaitFor(t, "all but the deliveries the consumer died with", waitTimeout, func() bool { return c.AckedCount() >= len(msgs)-lost })
	time.Sleep(2 * time.Second) // one that was not lost would come now
	missing := c.Missing()
	if len(missing) != lost {
		t.Errorf("%s with SettleOnReceipt: %d events lost, want exactly the %d the dead consumer had received and not handled: missing %s",
			b.Name(), len(missing), lost, list(missing))
	}
	for _, id := range ids {
		if !slices.Contains(missing, id) {
			t.Errorf("%s with SettleOnReceipt: %s, in the dead consumer's hands, came back: the driver did not settle it on receipt", b.Name(), id)
		}
	}
	c.Check(t, false) // later versions of a lost one arrive out of order: that is the loss
}
