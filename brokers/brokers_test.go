package brokers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

func TestBackoff(t *testing.T) {
	o := brokers.SubscribeOptions{RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond}.WithDefaults()
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{1, 10 * time.Millisecond}, {2, 20 * time.Millisecond}, {3, 40 * time.Millisecond}, {4, 50 * time.Millisecond}, {40, 50 * time.Millisecond}} {
		if got := o.Backoff(tc.attempt); got != tc.want {
			t.Errorf("Backoff(%d) = %v, want %v", tc.attempt, got, tc.want)
		}
	}
	d := brokers.SubscribeOptions{}.WithDefaults()
	if d.Prefetch != 64 || d.RetryBackoff != 50*time.Millisecond || d.MaxRetryBackoff != 2*time.Second {
		t.Errorf("defaults: %+v", d)
	}
}

func TestFirstError(t *testing.T) {
	if err := brokers.FirstError([]error{nil, nil}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := brokers.FirstError([]error{nil, boom, errors.New("later")})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "2 of 3") {
		t.Fatalf("got %v", err)
	}
}

func TestCheckOptions(t *testing.T) {
	if err := brokers.CheckOptions("x", brokers.Options{"a": "1"}, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := brokers.CheckOptions("x", brokers.Options{"c": "1"}, "a", "b"); err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("got %v", err)
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[brokers.Verdict]string{brokers.Ack: "ack", brokers.Retry: "retry", brokers.Reject: "reject", brokers.Crash: "crash", 9: "verdict(9)"} {
		if v.String() != want {
			t.Errorf("%d: %q", int(v), v.String())
		}
	}
}

// PerDelivery must not handle a later delivery ahead of one that is to be
// retried, nor after a crash.
func TestPerDeliveryStopsAtRetryAndCrash(t *testing.T) {
	for _, stop := range []brokers.Verdict{brokers.Retry, brokers.Crash} {
		var seen []string
		h := brokers.PerDelivery(func(_ context.Context, d *brokers.Delivery) brokers.Verdict {
			seen = append(seen, d.ID)
			switch d.ID {
			case "b":
				return brokers.Reject
			case "c":
				return stop
			}
			return brokers.Ack
		})
		var ds []*brokers.Delivery
		for _, id := range []string{"a", "b", "c", "d"} {
			ds = append(ds, &brokers.Delivery{Message: brokers.Message{ID: id}})
		}
		vs := h(context.Background(), ds)
		if want := []brokers.Verdict{brokers.Ack, brokers.Reject, stop, stop}; !slices.Equal(vs, want) {
			t.Errorf("%v: verdicts %v, want %v", stop, vs, want)
		}
		if !slices.Equal(seen, []string{"a", "b", "c"}) {
			t.Errorf("%v: handled %v: d must not be handled after c", stop, seen)
		}
	}
}

func TestMaxBatchRaisesPrefetch(t *testing.T) {
	if o := (brokers.SubscribeOptions{}).WithDefaults(); o.MaxBatch != 1 {
		t.Errorf("default MaxBatch %d, want 1", o.MaxBatch)
	}
	o := brokers.SubscribeOptions{Prefetch: 16, MaxBatch: 100}.WithDefaults()
	if o.Prefetch != 100 || o.MaxBatch != 100 {
		t.Errorf("Prefetch %d MaxBatch %d, want both 100", o.Prefetch, o.MaxBatch)
	}
}

// HoldForBacklog holds the call until the subscription holds the batch
// and another one beyond it, and at least BacklogMinHold; it counts
// what the subscription holds, not what it ever received; a ctx that
// ends early does not cut the minimum short, and ends the wait after it.
func TestHoldForBacklog(t *testing.T) {
	var mu sync.Mutex
	st := brokers.Stats{Received: 3, Acked: 1} // 2 held: the batch of 2, nothing beyond
	stats := func() brokers.Stats { mu.Lock(); defer mu.Unlock(); return st }
	opts := brokers.SubscribeOptions{MaxBatch: 2}
	done := make(chan brokers.Backlog, 1)
	start := time.Now()
	go func() { done <- brokers.HoldForBacklog(context.Background(), stats, 2, opts) }()
	select {
	case b := <-done:
		t.Fatalf("returned %+v before the backlog built", b)
	case <-time.After(brokers.BacklogMinHold + 300*time.Millisecond):
	}
	mu.Lock()
	st.Received, st.Acked = 9, 4 // 5 held: the batch and 3 more
	mu.Unlock()
	b := <-done
	if want := (brokers.Backlog{Held: 5, Batch: 2, Want: 4, Reached: true}); b != want {
		t.Fatalf("got %+v, want %+v", b, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	b = brokers.HoldForBacklog(ctx, func() brokers.Stats { return brokers.Stats{Received: 1} }, 1, brokers.SubscribeOptions{})
	if waited := time.Since(start); waited < brokers.BacklogMinHold || waited > brokers.BacklogMinHold+time.Second || b.Reached || b.Held != 1 || b.Want != 2 {
		t.Fatalf("ctx ended: waited %v, got %+v; want the minimum hold, then Held 1 of Want 2, not reached", waited, b)
	}
}

// PublishWindow: the default when unset, the value when positive, and an
// error naming the driver and the option otherwise.
func TestPublishWindow(t *testing.T) {
	if n, err := brokers.PublishWindow("d", nil, 7); n != 7 || err != nil {
		t.Errorf("unset: %d, %v; want 7", n, err)
	}
	if n, err := brokers.PublishWindow("d", brokers.Options{brokers.OptPublishWindow: "3"}, 7); n != 3 || err != nil {
		t.Errorf("3: %d, %v; want 3", n, err)
	}
	for _, v := range []string{"0", "-1", "x", ""} {
		_, err := brokers.PublishWindow("d", brokers.Options{brokers.OptPublishWindow: v}, 7)
		if err == nil || !strings.Contains(err.Error(), "d: option publish-window=") {
			t.Errorf("%q: %v; want an error naming the driver and the option", v, err)
		}
	}
}
