package driverutil

import (
	"context"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

func TestHandleRetriesInPlace(t *testing.T) {
	var c brokers.Counters
	calls := 0
	h := func(_ context.Context, d *brokers.Delivery) brokers.Verdict {
		calls++
		if d.Attempt != calls {
			t.Errorf("attempt %d on call %d", d.Attempt, calls)
		}
		if calls < 3 {
			return brokers.Retry
		}
		return brokers.Ack
	}
	opts := brokers.SubscribeOptions{RetryBackoff: time.Millisecond}.WithDefaults()
	v, ok := Handle(context.Background(), h, &brokers.Delivery{}, opts, &c)
	if v != brokers.Ack || !ok || calls != 3 {
		t.Fatalf("verdict %v finished %v calls %d", v, ok, calls)
	}
	if st := c.Stats(); st.Deliveries != 3 || st.Retried != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHandleStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := func(context.Context, *brokers.Delivery) brokers.Verdict { cancel(); return brokers.Retry }
	opts := brokers.SubscribeOptions{RetryBackoff: time.Hour}.WithDefaults()
	if _, ok := Handle(ctx, h, &brokers.Delivery{}, opts, &brokers.Counters{}); ok {
		t.Fatal("a cancelled retry counted as finished")
	}
}

func TestShardStable(t *testing.T) {
	if Shard("order-42", 8) != Shard("order-42", 8) || Shard("a", 1) != 0 {
		t.Fatal("shard not stable")
	}
	seen := map[int]bool{}
	for i := 0; i < 200; i++ {
		seen[Shard(string(rune('a'+i%26))+string(rune('a'+i/26)), 8)] = true
	}
	if len(seen) != 8 {
		t.Fatalf("200 keys used %d of 8 shards", len(seen))
	}
}

func TestLifecycleFirstFinishWins(t *testing.T) {
	l := NewLifecycle()
	l.Finish(nil)
	l.Finish(brokers.ErrCrashed)
	<-l.Done()
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}
