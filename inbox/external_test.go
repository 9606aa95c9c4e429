package inbox

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/external"
)

// The external strategies against PostgreSQL and the external service on
// loopback: what each does on a redelivery, a call that timed out after
// it was applied, a handler that died between the call and its commit,
// and a service that refuses calls.

var errDied = errors.New("died after the call (test)")

// extEnv is an inbox with an external service of its own; with crash set,
// the first AfterCall of each event fails as a dead handler would.
type extEnv struct {
	in     *Inbox
	client *external.Client
	crash  atomic.Bool
	fault  atomic.Bool // ask the service to hold the next answers (once per reference)
	died   sync.Map    // event keys whose handler died once
}

func newExtEnv(t *testing.T, mutate func(*Options)) *extEnv {
	t.Helper()
	srv, err := external.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	e := &extEnv{client: external.NewClient(srv.URL, "t", 300*time.Millisecond)}
	e.client.Fault = func(external.Request) string {
		if e.fault.Load() {
			return external.FaultTimeout
		}
		return ""
	}
	e.in = newInbox(t, func(o *Options) {
		o.External = e.client
		o.Lease = 200 * time.Millisecond
		o.AfterCall = func(_ context.Context, _ string, ev *envelope.Event) error {
			if _, again := e.died.LoadOrStore(ev.Key(), true); e.crash.Load() && !again {
				return errDied
			}
			return nil
		}
		if mutate != nil {
			mutate(o)
		}
	})
	return e
}

func (e *extEnv) tally(t *testing.T) external.Tally {
	t.Helper()
	l, err := e.client.Log(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l.Tally()
}

func (e *extEnv) flush(t *testing.T, s Strategy) {
	t.Helper()
	if r, ok := s.(Relaying); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.FlushRelay(ctx, e.in); err != nil {
			t.Fatalf("flush relay: %v", err)
		}
	}
}

// extFile is the example strategy file with an external step.
const extFile = "external-key.sql"

var extCorrect = []string{"ext-key", "ext-lease", "ext-outbox", extFile}

// extStrategy is a built-in strategy, or the example file.
func extStrategy(t *testing.T, name string) Strategy {
	t.Helper()
	if name != extFile {
		return mustStrategy(t, name)
	}
	s, err := LoadStrategyFile(filepath.Join(examplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A clean run, a redelivery and a stale event: one payment per applied
// increment, none for a duplicate or a stale event, none for a snapshot.
func TestExternalStrategiesPayOnce(t *testing.T) {
	for _, name := range extCorrect {
		t.Run(name, func(t *testing.T) {
			e := newExtEnv(t, nil)
			s := extStrategy(t, name)
			if !CallsExternal(s) {
				t.Fatalf("%s does not declare its external step", name)
			}
			expect(t, apply(t, e.in, s, "c", ev("e1", "a", 1, 10)), Applied)
			expect(t, apply(t, e.in, s, "c", ev("e1", "a", 1, 10)), Duplicate)
			expect(t, apply(t, e.in, s, "c", ev("e2", "a", 2, 5)), Applied)
			expect(t, apply(t, e.in, s, "c", ev("old", "a", 1, 7)), Stale)
			expect(t, apply(t, e.in, s, "c", snap("s3", "a", 3, 100)), Applied)
			expect(t, apply(t, e.in, s, "c", ev("gap", "a", 9, 1)), Gap)
			e.flush(t, s)
			wantAccount(t, e.in, "a", 100, 3)
			if tl := e.tally(t); tl.Effects != 2 || tl.Calls != 2 {
				t.Fatalf("%s: service tally %+v: want 2 calls, 2 payments", name, tl)
			}
			if n := inboxRows(t, e.in, "c"); n != 3 {
				t.Fatalf("%d inbox rows, want 3", n)
			}
		})
	}
}

// The call times out after the service applied it: the correct patterns
// pay once (the retry carries the same key); a new key per attempt pays
// twice.
func TestExternalTimeoutAfterApply(t *testing.T) {
	for name, effects := range map[string]int64{"ext-key": 1, "ext-lease": 1, "ext-outbox": 1, extFile: 1, "broken-ext-new-key": 2, "broken-ext-after-commit": 2} {
		t.Run(name, func(t *testing.T) {
			e := newExtEnv(t, nil)
			e.fault.Store(true)
			s := extStrategy(t, name)
			expect(t, apply(t, e.in, s, "c", ev("e1", "a", 1, 10)), Applied)
			e.flush(t, s)
			wantAccount(t, e.in, "a", 10, 1)
			if tl := e.tally(t); tl.Effects != effects || tl.TimedOut != 1 {
				t.Fatalf("%s: service tally %+v: want %d payment(s), one answer held", name, tl, effects)
			}
		})
	}
}

// The handler dies between the call and its commit; the redelivery
// finishes the event with the same key (ext-lease: after the lease
// expired, by asking for the key's result, without paying again).
func TestExternalDiesBeforeCommit(t *testing.T) {
	for _, tc := range []struct {
		name             string
		effects, replays int64
		queries          int64
		balance          int64
	}{
		{name: "ext-key", effects: 1, replays: 1, balance: 10},
		{name: extFile, effects: 1, replays: 1, balance: 10},
		{name: "ext-lease", effects: 1, queries: 1, balance: 10},
		{name: "broken-ext-new-key", effects: 2, balance: 10},
		// Exists means succeeded: acked as a duplicate, never finished.
		{name: "broken-ext-exists", effects: 1, balance: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExtEnv(t, nil)
			e.crash.Store(true)
			s := extStrategy(t, tc.name)
			o, _ := e.in.Apply(ctxT(t), s, "c", ev("e1", "a", 1, 10))
			if !errors.Is(o.Err, errDied) {
				t.Fatalf("first delivery: %v %v: want the handler's death", o.Result, o.Err)
			}
			o = apply(t, e.in, s, "c", ev("e1", "a", 1, 10))
			wantAccount(t, e.in, "a", tc.balance, map[bool]int64{true: 1, false: 0}[tc.balance > 0])
			tl := e.tally(t)
			if tl.Effects != tc.effects || tl.Replays != tc.replays || tl.Queries != tc.queries {
				t.Fatalf("%s: second delivery %s; service tally %+v: want %d payment(s), %d replay(s), %d quer(ies)", tc.name, o.Result, tl, tc.effects, tc.replays, tc.queries)
			}
			snap, err := ReadSnapshot(ctxT(t), e.in.pool, e.in.Schema(), "c", false)
			if err != nil {
				t.Fatal(err)
			}
			if stuck := len(snap.Unfinished); (tc.name == "broken-ext-exists") != (stuck == 1) {
				t.Fatalf("unfinished operations %v", snap.Unfinished)
			}
		})
	}
}

// The relay dies between its calls and marking them sent: the rows stay
// pending and are sent again, with their keys.
func TestOutboxRelayDiesBeforeCommit(t *testing.T) {
	e := newExtEnv(t, nil)
	s := mustStrategy(t, "ext-outbox")
	for v := int64(1); v <= 3; v++ {
		expect(t, apply(t, e.in, s, "c", ev("e"+string(rune('0'+v)), "a", v, 10)), Applied)
	}
	e.crash.Store(true)
	if n, err := e.in.relayOnce(ctxT(t)); !errors.Is(err, errDied) || n != 0 {
		t.Fatalf("relay: %d sent, %v: want the relay's death, nothing marked sent", n, err)
	}
	e.flush(t, s)
	if tl := e.tally(t); tl.Effects != 3 || tl.Replays < 1 {
		t.Fatalf("service tally %+v: want 3 payments and the resent ones replayed", tl)
	}
	if n := count(t, e.in, `SELECT count(*) FROM %s.outbox WHERE sent_at IS NULL`); n != 0 {
		t.Fatalf("%d outbox rows pending", n)
	}
}

// The service refuses calls for a while: the correct patterns retry until
// it is back; calling after the commit without a key gives up, and the
// payment is lost.
func TestExternalUnavailable(t *testing.T) {
	for name, effects := range map[string]int64{"ext-key": 1, "ext-lease": 1, "ext-outbox": 1, extFile: 1, "broken-ext-after-commit": 0} {
		t.Run(name, func(t *testing.T) {
			e := newExtEnv(t, nil)
			if err := e.client.SetUnavailable(context.Background(), 400*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			s := extStrategy(t, name)
			expect(t, apply(t, e.in, s, "c", ev("e1", "a", 1, 10)), Applied)
			e.flush(t, s)
			if tl := e.tally(t); tl.Effects != effects || tl.Refused == 0 {
				t.Fatalf("%s: service tally %+v: want %d payment(s) after refusals", name, tl, effects)
			}
		})
	}
}

// An operation taken over too often is STUCK: reported (a permanent
// failure), never retried by itself.
func TestLeaseStuck(t *testing.T) {
	e := newExtEnv(t, func(o *Options) { o.LeaseTakeovers = 2; o.MaxAttempts = 50 })
	if err := e.client.SetUnavailable(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	o, _ := e.in.Apply(ctxT(t), mustStrategy(t, "ext-lease"), "c", ev("e1", "a", 1, 10))
	if f := Describe(o.Err); f.Kind != "external_stuck" || f.Retryable {
		t.Fatalf("outcome %v %v (%+v): want external_stuck, not retryable", o.Result, o.Err, f)
	}
	snap, err := ReadSnapshot(ctxT(t), e.in.pool, e.in.Schema(), "c", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Unfinished["urn:inboxbench:test e1"]; got == "" {
		t.Fatalf("unfinished %v: want e1 STUCK", snap.Unfinished)
	}
}

// Without a service the external strategies fail, naming what is missing.
func TestExternalWithoutService(t *testing.T) {
	in := newInbox(t, nil)
	o, _ := in.Apply(ctxT(t), mustStrategy(t, "ext-key"), "c", ev("e1", "a", 1, 10))
	if f := Describe(o.Err); f.Kind != "external_missing" || f.Retryable {
		t.Fatalf("%v: %+v", o.Err, f)
	}
}
