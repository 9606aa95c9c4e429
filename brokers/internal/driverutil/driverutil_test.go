package driverutil

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// settled records what a Settle call was given.
type settled struct {
	ids []string
	vs  []brokers.Verdict
}

func recorder(out *[]settled) Settle {
	return func(ds []*brokers.Delivery, vs []brokers.Verdict) error {
		s := settled{vs: append([]brokers.Verdict(nil), vs...)}
		for _, d := range ds {
			s.ids = append(s.ids, d.ID)
		}
		*out = append(*out, s)
		return nil
	}
}

func batch(ids ...string) []*brokers.Delivery {
	var ds []*brokers.Delivery
	for _, id := range ids {
		ds = append(ds, &brokers.Delivery{Message: brokers.Message{ID: id}})
	}
	return ds
}

func ids(ds []*brokers.Delivery) string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return strings.Join(out, ",")
}

// sub is a Sub calling h, whose end does nothing.
func sub(h brokers.Handler, opts brokers.SubscribeOptions) *Sub {
	s := &Sub{}
	s.Init(opts, h, func(error) {})
	return s
}

func TestHandleBatchRetriesFromTheFirstRetry(t *testing.T) {
	var calls []string
	var attempts []int
	h := func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
		calls = append(calls, ids(ds))
		attempts = append(attempts, ds[0].Attempt)
		switch len(calls) {
		case 1: // a b c d → ack, reject, retry, ack: settle a, b; retry c, d
			return []brokers.Verdict{brokers.Ack, brokers.Reject, brokers.Retry, brokers.Ack}
		case 2: // c d → ack, retry: settle c; retry d
			return []brokers.Verdict{brokers.Ack, brokers.Retry}
		}
		return []brokers.Verdict{brokers.Ack}
	}
	var got []settled
	s := sub(h, brokers.SubscribeOptions{RetryBackoff: time.Millisecond})
	out, err := s.HandleBatch(context.Background(), batch("a", "b", "c", "d"), recorder(&got))
	if out != Settled || err != nil {
		t.Fatalf("outcome %v, %v", out, err)
	}
	if want := []string{"a,b,c,d", "c,d", "d"}; !slices.Equal(calls, want) {
		t.Fatalf("handler calls %q, want %q", calls, want)
	}
	if want := []int{1, 2, 3}; !slices.Equal(attempts, want) {
		t.Errorf("attempts of the first delivery per call %v, want %v", attempts, want)
	}
	want := []settled{
		{[]string{"a", "b"}, []brokers.Verdict{brokers.Ack, brokers.Reject}},
		{[]string{"c"}, []brokers.Verdict{brokers.Ack}},
		{[]string{"d"}, []brokers.Verdict{brokers.Ack}},
	}
	if len(got) != len(want) {
		t.Fatalf("settled %+v, want %+v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) || !slices.Equal(got[i].vs, want[i].vs) {
			t.Errorf("settle %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if st := s.Stats(); st.Deliveries != 7 || st.Retried != 2 || st.Acked != 3 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHandleBatchCrashSettlesNothing(t *testing.T) {
	var got []settled
	h := func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
		return []brokers.Verdict{brokers.Ack, brokers.Reject, brokers.Crash}
	}
	out, err := sub(h, brokers.SubscribeOptions{}).HandleBatch(context.Background(), batch("a", "b", "c"), recorder(&got))
	if out != Crashed || err != nil || len(got) != 0 {
		t.Fatalf("outcome %v err %v settled %+v", out, err, got)
	}
}

func TestHandleBatchWrongVerdictCount(t *testing.T) {
	var got []settled
	h := func(context.Context, []*brokers.Delivery) []brokers.Verdict { return []brokers.Verdict{brokers.Ack} }
	out, err := sub(h, brokers.SubscribeOptions{}).HandleBatch(context.Background(), batch("a", "b"), recorder(&got))
	if out != Failed || err == nil || !strings.Contains(err.Error(), "1 verdicts for a batch of 2") || len(got) != 0 {
		t.Fatalf("outcome %v err %v settled %+v", out, err, got)
	}
}

func TestHandleBatchSettleError(t *testing.T) {
	boom := errors.New("boom")
	h := func(context.Context, []*brokers.Delivery) []brokers.Verdict { return []brokers.Verdict{brokers.Ack} }
	out, err := sub(h, brokers.SubscribeOptions{}).HandleBatch(context.Background(), batch("a"),
		func([]*brokers.Delivery, []brokers.Verdict) error { return boom })
	if out != Failed || !errors.Is(err, boom) {
		t.Fatalf("outcome %v err %v", out, err)
	}
}

func TestHandleBatchStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var got []settled
	h := func(context.Context, []*brokers.Delivery) []brokers.Verdict {
		cancel()
		return []brokers.Verdict{brokers.Ack, brokers.Retry}
	}
	out, _ := sub(h, brokers.SubscribeOptions{RetryBackoff: time.Hour}).HandleBatch(ctx, batch("a", "b"), recorder(&got))
	if out != Unfinished {
		t.Fatalf("a cancelled retry ended as %v", out)
	}
	// The handler finished a before the cancel: that ack is kept.
	if len(got) != 1 || !slices.Equal(got[0].ids, []string{"a"}) {
		t.Fatalf("settled %+v, want a", got)
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

func TestSubFirstFinishWins(t *testing.T) {
	s := sub(nil, brokers.SubscribeOptions{})
	s.Finish(nil)
	s.Finish(brokers.ErrCrashed)
	<-s.Done()
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// closer counts its Close calls.
type closer struct{ n *int }

func (c closer) Close() error { *c.n++; return nil }

// Close closes every registered subscription once, refuses later ones,
// and a second Close does nothing.
func TestSubsCloseOnce(t *testing.T) {
	var mu sync.Mutex
	subs := NewSubs[closer](&mu)
	var n1, n2, n3 int
	subs.Add(closer{&n1})
	subs.Add(closer{&n2})
	subs.Remove(closer{&n2})
	locked := false
	if first, err := subs.Close(func() { locked = !mu.TryLock() }); !first || err != nil || !locked {
		t.Fatalf("first Close: %v, %v; ran under the lock: %v", first, err, locked)
	}
	if n1 != 1 || n2 != 0 {
		t.Fatalf("closed %d and %d times, want 1 and 0 (removed)", n1, n2)
	}
	if subs.Add(closer{&n3}) || !subs.Closed() {
		t.Fatal("a closed set took a subscription")
	}
	if first, _ := subs.Close(nil); first || n1 != 1 {
		t.Fatalf("second Close: first %v, closed %d times", first, n1)
	}
}

// Handle goes on after a settled batch only; a crash crashes the
// subscription and a failure goes to fail.
func TestHandleOutcomes(t *testing.T) {
	for _, tc := range []struct {
		v                    brokers.Verdict
		goOn, crashed, fails bool
	}{
		{brokers.Ack, true, false, false},
		{brokers.Crash, false, true, false},
		{brokers.Reject, false, false, true}, // the settle below fails
	} {
		var ended error
		s := &Sub{}
		s.Init(brokers.SubscribeOptions{}, func(context.Context, []*brokers.Delivery) []brokers.Verdict {
			return []brokers.Verdict{tc.v}
		}, func(cause error) { ended = cause })
		settle := func(_ []*brokers.Delivery, vs []brokers.Verdict) error {
			if vs[0] == brokers.Reject {
				return errors.New("no dead-letter queue")
			}
			return nil
		}
		var failed error
		goOn := s.Handle(context.Background(), batch("a"), settle, func(err error) { failed = err })
		if goOn != tc.goOn || s.Crashed() != tc.crashed || (failed != nil) != tc.fails {
			t.Errorf("%v: goes on %v, crashed %v, failed %v", tc.v, goOn, s.Crashed(), failed)
		}
		if tc.crashed && (!errors.Is(ended, brokers.ErrCrashed) || s.Stats().Crashed != 1) {
			t.Errorf("%v: ended with %v, stats %+v", tc.v, ended, s.Stats())
		}
	}
}

// InOrder dead-letters a prefix's Rejects in order and acks up to its
// last delivery; after a failed copy it acks only what precedes it.
func TestInOrder(t *testing.T) {
	var dead, acked []int
	failAt := 3
	settle := InOrder(func(i int) error {
		if i == failAt {
			return errors.New("no copy")
		}
		dead = append(dead, i)
		return nil
	}, func(i int) { acked = append(acked, i) })
	ds := batch("a", "b", "c", "d", "e")
	A, R := brokers.Ack, brokers.Reject
	if err := settle(ds[:2], []brokers.Verdict{A, R}); err != nil {
		t.Fatal(err)
	}
	if err := settle(ds[2:5], []brokers.Verdict{A, R, A}); err == nil {
		t.Fatal("a failed dead-letter copy settled")
	}
	if !slices.Equal(dead, []int{1}) || !slices.Equal(acked, []int{1, 2}) {
		t.Fatalf("dead-lettered %v, acked up to %v; want [1], [1 2]", dead, acked)
	}
}

// Warn logs the first of a burst of warnings of one subscription and
// drops the rest within WarnEvery; another subscription warns on its own.
func TestWarnAtMostOncePerInterval(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil)))
	defer slog.SetDefault(prev)
	var a, b Sub
	for range 5 {
		a.Warn("a failed")
	}
	b.Warn("b failed")
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "a failed"); n != 1 {
		t.Errorf("a burst of 5 warnings logged %d times, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "b failed") {
		t.Errorf("another subscription's warning was dropped:\n%s", buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A shard count found at the broker is kept; a failed lookup is not.
func TestCachedShards(t *testing.T) {
	var mu sync.Mutex
	counts, lookups := map[string]int{"set-up": 4}, 0
	lookup := func(n int, err error) func() (int, error) {
		return func() (int, error) { lookups++; return n, err }
	}
	if n, err := CachedShards(&mu, counts, "set-up", lookup(9, nil)); n != 4 || err != nil || lookups != 0 {
		t.Fatalf("a topic set up here: %d, %v after %d lookups; want 4 without a lookup", n, err, lookups)
	}
	if _, err := CachedShards(&mu, counts, "other", lookup(0, errors.New("no such topic"))); err == nil {
		t.Fatal("a failed lookup returned no error")
	}
	for range 2 {
		if n, err := CachedShards(&mu, counts, "other", lookup(3, nil)); n != 3 || err != nil {
			t.Fatalf("another process's topic: %d, %v; want 3", n, err)
		}
	}
	if lookups != 2 {
		t.Fatalf("%d lookups, want 2: the failed one and the first found", lookups)
	}
}
