package inbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
)

// Each negative control must produce exactly the wrong state its mistake
// predicts; the matching correct behaviour is asserted next to it where it
// makes the contrast clearer. (broken-split is in TestExperimentSplit.)

func TestBrokenCheckThenInsert(t *testing.T) {
	for _, tc := range []struct {
		strategy    string
		wantApplied int
		wantBalance int64
	}{
		{"broken-check-then-insert", 2, 20}, // both saw "absent": duplicate-effect
		{"tx", 1, 10},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			t.Parallel()
			// A two-party barrier after the check widens the race window so
			// both deliveries are inside it; the correct strategy's loser
			// never reaches the hook (it waits on the winner's key), so the
			// barrier gives up after a moment there.
			var mu sync.Mutex
			arrived := 0
			release := make(chan struct{})
			in := newInbox(t, func(o *Options) {
				o.BeforeEffect = func(ctx context.Context, consumer string, ev *envelope.Event) error {
					mu.Lock()
					arrived++
					if arrived == 2 {
						close(release)
					}
					mu.Unlock()
					select {
					case <-release:
					case <-time.After(300 * time.Millisecond):
					}
					return nil
				}
			})
			s := mustStrategy(t, tc.strategy)
			resetAccount(t, in, consumer, order42)
			e := ev("payment-recorded-42-1", order42, 1, 10)
			var wg sync.WaitGroup
			outs := make([]Outcome, 2)
			for g := range 2 {
				wg.Go(func() { outs[g], _ = in.Apply(ctxT(t), s, consumer, e) })
			}
			wg.Wait()
			applied := 0
			for _, o := range outs {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				if o.Result == Applied {
					applied++
				}
			}
			if applied != tc.wantApplied {
				t.Fatalf("%d APPLIED, want %d", applied, tc.wantApplied)
			}
			wantAccount(t, in, order42, tc.wantBalance, 1)
			wantInboxRows(t, in, 1)
		})
	}
}

// Inventory and audit consume the same event, each into its own table.
func TestBrokenGlobalKey(t *testing.T) {
	for _, tc := range []struct {
		strategy       string
		wantAudit      Result
		wantAuditState accountState
		wantAuditInbox int64
	}{
		{"broken-global-key", Duplicate, accountState{}, 0}, // audit lost the event
		{"tx", Applied, accountState{Balance: 10, Version: 1, Exists: true}, 1},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			t.Parallel()
			inventory := newInbox(t, nil)
			ctx := ctxT(t)
			if err := EnsureAccountTable(ctx, inventory.pool, inventory.Schema(), "account_audit"); err != nil {
				t.Fatal(err)
			}
			audit, err := New(inventory.pool, Options{Schema: inventory.Schema(), AccountTable: "account_audit"})
			if err != nil {
				t.Fatal(err)
			}
			s := mustStrategy(t, tc.strategy)
			e := ev("payment-recorded-42-1", order42, 1, 10)
			expect(t, apply(t, inventory, s, "inventory", e), Applied)
			expect(t, apply(t, audit, s, "audit", e), tc.wantAudit)
			wantAccount(t, inventory, order42, 10, 1)
			if got := accountIn(t, audit, "account_audit", order42); got != tc.wantAuditState {
				t.Fatalf("audit account %+v, want %+v", got, tc.wantAuditState)
			}
			if n := inboxRows(t, inventory, "inventory"); n != 1 {
				t.Fatalf("inventory inbox=%d, want 1", n)
			}
			if n := inboxRows(t, audit, "audit"); n != tc.wantAuditInbox {
				t.Fatalf("audit inbox=%d, want %d", n, tc.wantAuditInbox)
			}
		})
	}
}

func TestBrokenAggregateKey(t *testing.T) {
	in := newInbox(t, nil)
	s := mustStrategy(t, "broken-aggregate-key")
	resetAccount(t, in, consumer, order42)
	expect(t, apply(t, in, s, consumer, ev("payment-recorded-42-1", order42, 1, 10)), Applied)
	// The order's next legitimate event is taken for a duplicate: lost-effect.
	expect(t, apply(t, in, s, consumer, ev("payment-recorded-42-2", order42, 2, 20)), Duplicate)
	wantAccount(t, in, order42, 10, 1)
	wantInboxRows(t, in, 1)
}

// broken-no-version through the article's order experiment.
func TestBrokenNoVersion(t *testing.T) {
	in := newInbox(t, nil)
	s := mustStrategy(t, "broken-no-version")
	resetAccount(t, in, consumer, order42)
	e1 := ev("payment-recorded-42-1", order42, 1, 10)
	e2 := ev("payment-recorded-42-2", order42, 2, 20)
	expect(t, apply(t, in, s, consumer, e2), Applied) // version-gap: v0 → v2
	wantAccount(t, in, order42, 20, 2)
	expect(t, apply(t, in, s, consumer, e1), Applied) // version moves backwards
	wantAccount(t, in, order42, 30, 1)
	expect(t, apply(t, in, s, consumer, e2), Duplicate)                                                  // the inbox itself is right
	expect(t, apply(t, in, s, consumer, ev("payment-recorded-42-1-corrected", order42, 1, 10)), Applied) // stale-applied
	wantAccount(t, in, order42, 40, 1)
	wantInboxRows(t, in, 3)
}

// broken-ack-before-commit applies like tx; its mistake is the runner's ack
// ordering, which it announces.
func TestBrokenAckBeforeCommit(t *testing.T) {
	s := mustStrategy(t, "broken-ack-before-commit")
	a, ok := s.(AckOrdering)
	if !ok || !a.AckBeforeCommit() || !s.Broken() {
		t.Fatalf("broken-ack-before-commit must be broken and ack before commit")
	}
	in := newInbox(t, nil)
	resetAccount(t, in, consumer, order42)
	e := ev("payment-recorded-42-1", order42, 1, 10)
	expect(t, apply(t, in, s, consumer, e), Applied)
	expect(t, apply(t, in, s, consumer, e), Duplicate)
	wantAccount(t, in, order42, 10, 1)
}

func TestBrokenSplitRejectionKeepsInboxRow(t *testing.T) {
	// Even without an injected failure, broken-split leaves an inbox row
	// for a rejected gap: the redelivery after the predecessor is skipped.
	in := newInbox(t, nil)
	s := mustStrategy(t, "broken-split")
	resetAccount(t, in, consumer, order42)
	e1 := ev("payment-recorded-42-1", order42, 1, 10)
	e2 := ev("payment-recorded-42-2", order42, 2, 20)
	expect(t, apply(t, in, s, consumer, e2), Gap)
	expect(t, apply(t, in, s, consumer, e1), Applied)
	expect(t, apply(t, in, s, consumer, e2), Duplicate) // inbox-without-effect
	wantAccount(t, in, order42, 10, 1)
	wantInboxRows(t, in, 2)
	_, err := in.Apply(ctxT(t), s, consumer, &envelope.Event{})
	if !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("invalid event: %v, want ErrInvalidEvent", err)
	}
}
