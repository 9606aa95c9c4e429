package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/inboxbench/inboxbench/envelope"
)

// The article's four experiments, with its exact final states, for every
// correct strategy. Each starts from the article's reset: consumer
// balance-v1 with an empty inbox, order-42 at balance 0, version 0.

const (
	consumer = "balance-v1"
	order42  = "order-42"
)

func TestExperimentDuplicate(t *testing.T) { forEachCorrect(t, nil, experimentDuplicate) }

// The experiments' bodies are functions so that they run on both layouts
// (partition_test.go).
func experimentDuplicate(t *testing.T, in *Inbox, s Strategy) {
	resetAccount(t, in, consumer, order42)
	e := ev("payment-recorded-42-1", order42, 1, 10)
	expect(t, apply(t, in, s, consumer, e), Applied)
	// The redelivery: same source and id (attempt is not identity).
	again := *e
	again.Attempt = 1
	o := apply(t, in, s, consumer, &again)
	expect(t, o, Duplicate)
	wantAccount(t, in, order42, 10, 1)
	wantInboxRows(t, in, 1)
	t.Logf("duplicate: redelivered=true duplicateSkipped=%t balance=10 inbox=1", o.Result == Duplicate)

	// Two copies in one call decide the same way.
	e2 := ev("payment-recorded-42-2", order42, 2, 5)
	outs, err := s.ApplyBatch(ctxT(t), in, consumer, []*envelope.Event{e2, e2})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, outs[0], Applied)
	expect(t, outs[1], Duplicate)
	wantAccount(t, in, order42, 15, 2)
}

// TestExperimentSplit reproduces the split-commit bug with broken-split
// and shows the correct tx strategy surviving the same failure.
func TestExperimentSplit(t *testing.T) {
	builtin := func(name string) func(*testing.T, *Inbox) Strategy {
		return func(t *testing.T, _ *Inbox) Strategy { return mustStrategy(t, name) }
	}
	experimentSplit(t, nil, []splitCase{
		{"broken-split", builtin("broken-split"), Duplicate, 0, 0}, // the article's bug: dedup "succeeded", balance stayed 0
		{"tx", builtin("tx"), Applied, 10, 1},                      // the claim rolled back with the update
	})
}

// splitCase is one strategy under the split-commit experiment, and the
// state its redelivery leaves.
type splitCase struct {
	name                  string
	strategy              func(*testing.T, *Inbox) Strategy
	wantRedelivery        Result
	wantBalance, wantVers int64
}

// experimentSplit fails each case's first delivery between claim and
// effect, delivers again, and checks what the redelivery found.
func experimentSplit(t *testing.T, mutate func(*Options), cases []splitCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var fail atomic32
			fail.set(1)
			in := newInbox(t, func(o *Options) {
				if mutate != nil {
					mutate(o)
				}
				o.MaxAttempts = 1 // the failure must surface, as in the article, not be retried away
				o.BeforeEffect = func(ctx context.Context, consumer string, ev *envelope.Event) error {
					if fail.get() == 1 {
						return ErrInjected
					}
					return nil
				}
			})
			s := tc.strategy(t, in)
			resetAccount(t, in, consumer, order42)
			e := ev("payment-recorded-42-1", order42, 1, 10)
			o, err := in.Apply(ctxT(t), s, consumer, e)
			if !errors.Is(err, ErrInjected) || o.Result != NoResult {
				t.Fatalf("first delivery: result %s, err %v; want no result and the injected failure", o.Result, err)
			}
			fail.set(0)
			o = apply(t, in, s, consumer, e)
			expect(t, o, tc.wantRedelivery)
			wantAccount(t, in, order42, tc.wantBalance, tc.wantVers)
			wantInboxRows(t, in, 1)
			t.Logf("split (%s): redelivered=true duplicateSkipped=%t balance=%d inbox=1", tc.name, o.Result == Duplicate, tc.wantBalance)
		})
	}
}

// TestExperimentConcurrent: two connections released by one barrier apply
// the same event; the primary key, not a Go lock, lets exactly one win.
func TestExperimentConcurrent(t *testing.T) { forEachCorrect(t, nil, experimentConcurrent) }

func experimentConcurrent(t *testing.T, in *Inbox, s Strategy) {
	const iterations = 50
	ctx := ctxT(t)
	for it := range iterations {
		resetAccount(t, in, consumer, order42)
		e := ev(fmt.Sprintf("payment-recorded-42-%d", it), order42, 1, 10)
		barrier := make(chan struct{})
		var wg sync.WaitGroup
		outs := make([]Outcome, 2)
		errs := make([]error, 2)
		for g := range 2 {
			wg.Go(func() {
				<-barrier
				outs[g], errs[g] = in.Apply(ctx, s, consumer, e)
			})
		}
		close(barrier)
		wg.Wait()
		got := map[Result]int{}
		for g := range 2 {
			if errs[g] != nil {
				t.Fatalf("iteration %d: %v", it, errs[g])
			}
			got[outs[g].Result]++
		}
		if got[Applied] != 1 || got[Duplicate] != 1 {
			t.Fatalf("iteration %d: results %v, want one APPLIED and one DUPLICATE", it, got)
		}
		wantAccount(t, in, order42, 10, 1)
		if n := inboxRows(t, in, consumer); n != 1 {
			t.Fatalf("iteration %d: inbox=%d, want 1", it, n)
		}
	}
	t.Logf("concurrent: applied=1 duplicate=1 balance=10 inbox=1 (x%d)", iterations)
}

// TestExperimentOrder, parking off: the gap is rejected and leaves nothing.
func TestExperimentOrder(t *testing.T) { forEachCorrect(t, parkingOff, experimentOrder) }

func experimentOrder(t *testing.T, in *Inbox, s Strategy) {
	resetAccount(t, in, consumer, order42)
	e1 := ev("payment-recorded-42-1", order42, 1, 10)
	e2 := ev("payment-recorded-42-2", order42, 2, 20)
	expect(t, apply(t, in, s, consumer, e2), Gap)
	if n := inboxRows(t, in, consumer); n != 0 {
		t.Fatalf("after the gap: inbox=%d, want 0 (the claim rolls back with it)", n)
	}
	wantAccount(t, in, order42, 0, 0)
	expect(t, apply(t, in, s, consumer, e1), Applied)
	expect(t, apply(t, in, s, consumer, e2), Applied)
	wantAccount(t, in, order42, 30, 2)
	expect(t, apply(t, in, s, consumer, e2), Duplicate)
	stale := ev("payment-recorded-42-1-corrected", order42, 1, 10)
	expect(t, apply(t, in, s, consumer, stale), Stale)
	wantAccount(t, in, order42, 30, 2)
	wantInboxRows(t, in, 2)
	if n := parkedRows(t, in, consumer); n != 0 {
		t.Fatalf("parked=%d with parking off", n)
	}
	t.Log("order: gapRejected=true recoveredVersion=2 duplicateSkipped=true staleRejected=true balance=30 inbox=2")
}

// TestExperimentOrderParked, parking on: the gap is held and drained when
// its predecessor commits, with its own inbox row.
func TestExperimentOrderParked(t *testing.T) { forEachCorrect(t, nil, experimentOrderParked) }

func experimentOrderParked(t *testing.T, in *Inbox, s Strategy) {
	resetAccount(t, in, consumer, order42)
	e1 := ev("payment-recorded-42-1", order42, 1, 10)
	e2 := ev("payment-recorded-42-2", order42, 2, 20)
	expect(t, apply(t, in, s, consumer, e2), Parked)
	// Redelivered while parked: parked again, not twice.
	expect(t, apply(t, in, s, consumer, e2), Parked)
	if n, p := inboxRows(t, in, consumer), parkedRows(t, in, consumer); n != 0 || p != 1 {
		t.Fatalf("after parking: inbox=%d parked=%d, want 0 and 1", n, p)
	}
	wantAccount(t, in, order42, 0, 0)
	o := apply(t, in, s, consumer, e1)
	expect(t, o, Applied)
	if len(o.Drained) != 1 || o.Drained[0].ID != e2.ID || o.Drained[0].Result != Applied {
		t.Fatalf("drained %+v, want %s APPLIED", o.Drained, e2.ID)
	}
	wantAccount(t, in, order42, 30, 2)
	if n, p := inboxRows(t, in, consumer), parkedRows(t, in, consumer); n != 2 || p != 0 {
		t.Fatalf("after draining: inbox=%d parked=%d, want 2 and 0", n, p)
	}
	expect(t, apply(t, in, s, consumer, e2), Duplicate)
	expect(t, apply(t, in, s, consumer, ev("payment-recorded-42-1-corrected", order42, 1, 10)), Stale)
	wantAccount(t, in, order42, 30, 2)
	if c := in.Counters(); c.Parked != 2 || c.Drained != 1 {
		t.Fatalf("counters %+v, want parked=2 drained=1", c)
	}
}

// TestOrderWithinBatch: out-of-order versions in one call end in version
// order, whatever the strategy.
func TestOrderWithinBatch(t *testing.T) {
	forEachCorrect(t, nil, func(t *testing.T, in *Inbox, s Strategy) {
		evs := []*envelope.Event{ev("a3", "agg-a", 3, 300), ev("a1", "agg-a", 1, 100), ev("b1", "agg-b", 1, 7), ev("a2", "agg-a", 2, 20), ev("a5", "agg-a", 5, 5000)}
		outs, err := s.ApplyBatch(ctxT(t), in, consumer, evs)
		if err != nil {
			t.Fatal(err)
		}
		effects := 0
		for _, o := range outs {
			if o.Result == Applied {
				effects++
			}
			for _, d := range o.Drained {
				if d.Result == Applied {
					effects++
				}
			}
		}
		if effects != 4 {
			t.Fatalf("outcomes %+v: %d effects, want 4 (a1, a2, a3, b1)", outs, effects)
		}
		wantAccount(t, in, "agg-a", 420, 3)
		wantAccount(t, in, "agg-b", 7, 1)
		if p := parkedRows(t, in, consumer); p != 1 {
			t.Fatalf("parked=%d, want 1 (a5)", p)
		}
		expect(t, apply(t, in, s, consumer, ev("a4", "agg-a", 4, 4)), Applied)
		wantAccount(t, in, "agg-a", 5424, 5)
	})
}

type atomic32 struct {
	mu sync.Mutex
	v  int
}

func (a *atomic32) set(v int) { a.mu.Lock(); a.v = v; a.mu.Unlock() }
func (a *atomic32) get() int  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }
