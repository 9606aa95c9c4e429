package driverutil

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

func msgs(n int) []brokers.Message {
	out := make([]brokers.Message, n)
	for i := range out {
		out[i].ID = string(rune('a' + i))
	}
	return out
}

// waitDone returns done's errors, failing after a while.
func waitDone(t *testing.T, ch <-chan []error) []error {
	t.Helper()
	select {
	case errs := <-ch:
		return errs
	case <-time.After(5 * time.Second):
		t.Fatal("no done")
		return nil
	}
}

// done runs once, after the last settle, with each message's outcome;
// settles out of order, twice or after the end change nothing.
func TestPendingSettlesOnceInAnyOrder(t *testing.T) {
	c := Calls{Driver: "d"}
	ch := make(chan []error, 2)
	boom := errors.New("boom")
	p := c.Start(context.Background(), "t", msgs(3), func(errs []error) { ch <- errs })
	p.Settle(2, nil)
	p.Settle(0, boom)
	p.Settle(2, boom) // again: ignored
	select {
	case <-ch:
		t.Fatal("done before the last message was settled")
	default:
	}
	p.Settle(1, nil) // runs done before returning
	select {
	case errs := <-ch:
		if errs[0] != boom || errs[1] != nil || errs[2] != nil {
			t.Fatalf("errs %v", errs)
		}
	default:
		t.Fatal("Settle of the last message returned before done ran")
	}
	p.Settle(1, boom)
	select {
	case <-ch:
		t.Fatal("done called twice")
	case <-time.After(20 * time.Millisecond):
	}
}

// A settle on the caller's goroutine never runs done there.
func TestSettleInCallRunsDoneElsewhere(t *testing.T) {
	c := Calls{Driver: "d"}
	release := make(chan struct{})
	ch := make(chan []error, 1)
	p := c.Start(context.Background(), "t", msgs(1), func(errs []error) { <-release; ch <- errs })
	p.SettleInCall(0, nil) // would block here if done ran on this goroutine
	close(release)
	if errs := waitDone(t, ch); errs[0] != nil {
		t.Fatal(errs)
	}
}

// ctx's end fails what is unsettled, at once.
func TestPendingCancelFailsTheRest(t *testing.T) {
	c := Calls{Driver: "d"}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan []error, 1)
	p := c.Start(ctx, "t", msgs(2), func(errs []error) { ch <- errs })
	p.Settle(0, nil)
	cancel()
	errs := waitDone(t, ch)
	if errs[0] != nil || !errors.Is(errs[1], context.Canceled) {
		t.Fatalf("errs %v", errs)
	}
	p.Settle(1, nil) // late: ignored
}

// Close waits for open calls, then fails them; it returns after every
// done, and refuses later calls.
func TestCallsCloseFailsOpenCalls(t *testing.T) {
	c := Calls{Driver: "d"}
	var dones atomic.Int32
	closed := errors.New("closed")
	var got []error
	p := c.Start(context.Background(), "t", msgs(2), func(errs []error) { got = errs; dones.Add(1) })
	p.Settle(0, nil)
	c.Close(closed, 20*time.Millisecond)
	if dones.Load() != 1 || got[0] != nil || !errors.Is(got[1], closed) {
		t.Fatalf("after Close: %d dones, errs %v", dones.Load(), got)
	}
	ch := make(chan []error, 1)
	if c.Start(context.Background(), "t", msgs(1), func(errs []error) { ch <- errs }) != nil {
		t.Fatal("Start after Close returned a call")
	}
	if errs := waitDone(t, ch); !errors.Is(errs[0], closed) {
		t.Fatal(errs)
	}
}

// fakeQueue records what Spread hands it and confirms it at once.
type fakeQueue struct{ got *[]string }

func (q fakeQueue) Send(_ context.Context, p *Pending, i int, m *brokers.Message) bool {
	*q.got = append(*q.got, m.ID)
	p.SettleInCall(i, nil)
	return true
}

// Spread hands each message to the queue of its key, in slice order; a
// failure to get the queues fails every message.
func TestSpread(t *testing.T) {
	c := Calls{Driver: "d"}
	ms := msgs(6)
	for i := range ms {
		ms[i].Key = []string{"x", "y"}[i%2]
	}
	got := make([][]string, 2)
	qs := []fakeQueue{{&got[0]}, {&got[1]}}
	ch := make(chan []error, 1)
	Spread(context.Background(), c.Start(context.Background(), "t", ms, func(errs []error) { ch <- errs }),
		func() ([]fakeQueue, error) { return qs, nil })
	if err := errors.Join(waitDone(t, ch)...); err != nil {
		t.Fatal(err)
	}
	x, y := Shard("x", 2), Shard("y", 2)
	if x == y || strings.Join(got[x], "") != "ace" || strings.Join(got[y], "") != "bdf" {
		t.Fatalf("queues got %q", got)
	}
	boom := errors.New("boom")
	Spread(context.Background(), c.Start(context.Background(), "t", ms, func(errs []error) { ch <- errs }),
		func() ([]fakeQueue, error) { return nil, boom })
	for _, err := range waitDone(t, ch) {
		if !errors.Is(err, boom) {
			t.Fatalf("got %v, want boom for every message", err)
		}
	}
}
