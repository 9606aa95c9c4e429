package external

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The key rules, through the HTTP API on loopback: no database.

func start(t *testing.T) *Server {
	t.Helper()
	s, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func client(t *testing.T, s *Server, ns string, timeout time.Duration) *Client {
	c := NewClient(s.URL, ns, timeout)
	t.Cleanup(c.Close)
	return c
}

func logOf(t *testing.T, c *Client) *Log {
	t.Helper()
	l, err := c.Log(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestKeyRules(t *testing.T) {
	s := start(t)
	c := client(t, s, "rules", 0)
	ctx := context.Background()
	req := Request{Key: "k1", Reference: "src e1", Account: "a", Amount: 10}

	first, err := c.Pay(ctx, req)
	if err != nil || first.Replayed || first.ID == "" {
		t.Fatalf("first call: %+v, %v: want a new payment", first, err)
	}
	again, err := c.Pay(ctx, req)
	if err != nil || !again.Replayed || again.ID != first.ID {
		t.Fatalf("repeat with the same key and request: %+v, %v: want the stored result %s, replayed", again, err, first.ID)
	}
	other := req
	other.Amount = 11
	if _, err := c.Pay(ctx, other); !errors.Is(err, ErrKeyConflict) || Retryable(err) {
		t.Fatalf("the key with a different request: %v: want ErrKeyConflict, not retryable", err)
	}
	p, found, err := c.Lookup(ctx, "k1")
	if err != nil || !found || p.ID != first.ID || p.Amount != 10 {
		t.Fatalf("lookup k1: %+v %v %v: want the first payment", p, found, err)
	}
	if _, found, err := c.Lookup(ctx, "never"); err != nil || found {
		t.Fatalf("lookup of a key never used: found=%v %v", found, err)
	}
	// Without a key every request is a new payment.
	noKey := Request{Reference: "src e2", Account: "a", Amount: 5}
	p1, err1 := c.Pay(ctx, noKey)
	p2, err2 := c.Pay(ctx, noKey)
	if err1 != nil || err2 != nil || p1.ID == p2.ID {
		t.Fatalf("two calls without a key: %s %s (%v %v): want two payments", p1.ID, p2.ID, err1, err2)
	}
	tl := logOf(t, c).Tally()
	want := Tally{Calls: 5, Effects: 3, Replays: 1, Conflicts: 1, Queries: 2}
	if tl != want {
		t.Fatalf("tally %+v, want %+v", tl, want)
	}
	// Another namespace knows nothing of these.
	if _, found, _ := client(t, s, "other", 0).Lookup(ctx, "k1"); found {
		t.Fatal("namespaces share keys")
	}
}

// A key is applied once however many callers race with it.
func TestConcurrentRepeatsApplyOnce(t *testing.T) {
	s := start(t)
	c := client(t, s, "race", 0)
	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := c.Pay(context.Background(), Request{Key: "k", Reference: "r", Account: "a", Amount: 1})
			if err != nil {
				t.Error(err)
			}
			ids[i] = p.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("payments %v: want one", ids)
		}
	}
	if tl := logOf(t, c).Tally(); tl.Effects != 1 || tl.Replays != 15 {
		t.Fatalf("tally %+v: want 1 applied, 15 replayed", tl)
	}
}

// The timeout fault: applied, answer held until the caller gave up, once
// per reference; the retry with the same key gets the stored result.
func TestTimeoutAfterApply(t *testing.T) {
	s := start(t)
	c := client(t, s, "timeout", 100*time.Millisecond)
	c.Fault = func(Request) string { return FaultTimeout }
	ctx := context.Background()
	req := Request{Key: "k", Reference: "r", Account: "a", Amount: 3}
	start := time.Now()
	if _, err := c.Pay(ctx, req); !errors.Is(err, ErrUnknownOutcome) || !Retryable(err) {
		t.Fatalf("held call: %v: want ErrUnknownOutcome", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("held call returned after %s: want the caller's timeout", d)
	}
	p, err := c.Pay(ctx, req)
	if err != nil || !p.Replayed {
		t.Fatalf("retry: %+v %v: want the stored result", p, err)
	}
	l := logOf(t, c)
	if tl := l.Tally(); tl.Effects != 1 || tl.Replays != 1 || tl.TimedOut != 1 {
		t.Fatalf("tally %+v: want 1 applied (timed out), 1 replayed", tl)
	}
}

func TestUnavailableAndDelay(t *testing.T) {
	s := start(t)
	c := client(t, s, "down", time.Second)
	ctx := context.Background()
	if err := c.Configure(ctx, Config{Delay: 30 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Pay(ctx, Request{Key: "k0", Reference: "r0", Account: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("a call took %s with a delay of 30ms", d)
	}
	if err := c.SetUnavailable(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	req := Request{Key: "k", Reference: "r", Account: "a", Amount: 1}
	if _, err := c.Pay(ctx, req); !errors.Is(err, ErrRefused) {
		t.Fatalf("while unavailable: %v: want ErrRefused", err)
	}
	if _, _, err := c.Lookup(ctx, "k"); !errors.Is(err, ErrRefused) {
		t.Fatalf("query while unavailable: %v: want ErrRefused", err)
	}
	time.Sleep(250 * time.Millisecond)
	if p, err := c.Pay(ctx, req); err != nil || p.Replayed {
		t.Fatalf("after the window: %+v %v: want a new payment (the refused call applied nothing)", p, err)
	}
	if tl := logOf(t, c).Tally(); tl.Effects != 2 || tl.Refused != 1 {
		t.Fatalf("tally %+v", tl)
	}
}

// A service that is not there refuses: nothing was sent.
func TestNoServiceRefuses(t *testing.T) {
	c := NewClient(refusingURL(t), "gone", time.Second)
	if _, err := c.Pay(context.Background(), Request{Key: "k", Reference: "r"}); !errors.Is(err, ErrRefused) {
		t.Fatalf("%v: want ErrRefused", err)
	}
}

func TestLogPages(t *testing.T) {
	s := start(t)
	c := client(t, s, "pages", 0)
	c.page = 5
	n := 2*c.page + 3
	for i := range n {
		if _, _, err := c.Lookup(context.Background(), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	l := logOf(t, c)
	if len(l.Calls) != n || l.Calls[n-1].Seq != int64(n) {
		t.Fatalf("log of %d calls, last seq %d: want %d", len(l.Calls), l.Calls[len(l.Calls)-1].Seq, n)
	}
	if err := c.Drop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(logOf(t, c).Calls) != 0 {
		t.Fatal("a dropped namespace kept its log")
	}
}

// refusingURL is a loopback URL whose port nothing listens on while the
// test runs: a socket holds it bound and never listens, so a connection is
// refused. (A closed server's port could be taken meanwhile by another
// test process's listener, which then accepts and resets the call.)
func refusingURL(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
