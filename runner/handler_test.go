package runner

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/workload"
)

// fakeSub is a subscription whose Stats the test sets.
type fakeSub struct{ received, acked atomic.Int64 }

func (*fakeSub) Done() <-chan struct{} { return nil }
func (*fakeSub) Err() error            { return nil }
func (*fakeSub) Close() error          { return nil }
func (s *fakeSub) Stats() brokers.Stats {
	return brokers.Stats{Received: s.received.Load(), Acked: s.acked.Load()}
}

// crashCell is a cell of strategy with one crash with a backlog, its
// handler (no database, no broker) and the deliveries of a batch of n.
func crashCell(t *testing.T, strategy string, n int) (*cell, *handler, []*brokers.Delivery) {
	t.Helper()
	spec := workload.Defaults()
	spec.BatchSize = n
	st, err := inbox.Lookup(strategy)
	if err != nil {
		t.Fatal(err)
	}
	c := &cell{o: &Options{Spec: &spec, Stream: Stream{CrashWithBacklog: 1}}, strategy: st, consumer: "c",
		t: newTally(false, RetryBound{}, 0), notes: &notes{}}
	var ds []*brokers.Delivery
	for _, p := range workload.Generate(&spec).Publishes[:n] {
		body, err := envelope.Marshal(p.Event)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, &brokers.Delivery{Message: brokers.Message{ID: p.Event.ID, Key: p.Event.Subject, Body: body}, Shard: "0"})
	}
	return c, newHandler(c, &inProcess{}), ds
}

// TestCrashWithBacklogHoldsTheBatch: the crash-with-backlog fault without
// a broker. A consumer's first call claims the cell's crash and holds its
// batch, unhandled (the handler has no database: applying would panic),
// while its subscription holds nothing beyond that batch; once the
// subscription holds another batch it dies (Crash verdicts, nothing
// committed) and the note says how many deliveries it held. The next
// subscription, every crash claimed, is handled as usual.
func TestCrashWithBacklogHoldsTheBatch(t *testing.T) {
	c, h, ds := crashCell(t, "batch", 3)
	sub := &fakeSub{}
	sub.received.Store(4) // the batch of 3 and one more: less than another batch
	v := newSubView(h.subscribeOptions())
	v.sub.Store(brokers.Subscription(sub))
	got := make(chan []brokers.Verdict, 1)
	start := time.Now()
	go func() { got <- h.within(v)(context.Background(), ds) }()
	// Another shard's call while the consumer dies: held too, and
	// handling nothing.
	other := make(chan []brokers.Verdict, 1)
	for !v.dying.Load() {
		time.Sleep(time.Millisecond)
	}
	go func() { other <- h.within(v)(context.Background(), ds[:1]) }()
	select {
	case vs := <-got:
		t.Fatalf("the call returned %v after %v, its subscription holding 4 deliveries: want it held until another batch came", vs, time.Since(start))
	case vs := <-other:
		t.Fatalf("another call of the dying consumer returned %v before it died", vs)
	case <-time.After(brokers.BacklogMinHold + 500*time.Millisecond):
	}
	sub.received.Store(9) // 6 held beyond a batch of 3
	var vs []brokers.Verdict
	select {
	case vs = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the call is still held with another batch in the subscription")
	}
	for i, v := range vs {
		if v != brokers.Crash {
			t.Fatalf("verdict %d is %v: a consumer that dies with its batch must settle none of it (%v)", i, v, vs)
		}
	}
	if vs := <-other; len(vs) != 1 || vs[0] != brokers.Crash {
		t.Fatalf("the other call of the dead consumer answered %v, want Crash", vs)
	}
	notes := strings.Join(c.notes.all(), "\n")
	if !strings.Contains(notes, "crash with a backlog 1 of 1: a consumer died holding 9 deliveries it had received and not settled, 3 of them in its handler") {
		t.Errorf("notes %q: want the count the consumer died with", notes)
	}
	if c.t.c.executions.Load() != 0 {
		t.Errorf("%d executions: the dying call applied its batch", c.t.c.executions.Load())
	}
	if !v.dying.Load() || h.claimed.Load() != 1 {
		t.Errorf("dying %v, claimed %d: want the subscription dying and the crash claimed", v.dying.Load(), h.claimed.Load())
	}
	// Every crash claimed: the next subscription's first call is not held
	// (it would apply, which needs a database: dieWithBacklog alone says).
	if h.dieWithBacklog(context.Background(), len(ds), newSubView(v.opts)) {
		t.Fatal("a second subscription died too: the cell has one crash with a backlog")
	}
}

// TestCrashWithBacklogAckFirst: the negative control that acks before
// its commit answers the held batch Ack, uncommitted, and its consumer
// lives on: a crash would have kept its acks from the broker.
func TestCrashWithBacklogAckFirst(t *testing.T) {
	c, h, ds := crashCell(t, "broken-ack-before-commit", 1)
	sub := &fakeSub{}
	sub.received.Store(2)
	v := newSubView(h.subscribeOptions())
	v.sub.Store(brokers.Subscription(sub))
	vs := h.within(v)(context.Background(), ds)
	if len(vs) != 1 || vs[0] != brokers.Ack || v.dying.Load() || c.t.c.executions.Load() != 0 {
		t.Fatalf("verdicts %v, dying %v, executions %d: want the batch acked uncommitted and the consumer living on", vs, v.dying.Load(), c.t.c.executions.Load())
	}
	select {
	case <-v.died:
	default:
		t.Fatal("the consumer's other calls are still held")
	}
}
