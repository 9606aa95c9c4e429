package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/jackc/pgx/v5"
)

func keyed(id, agg string, version, amount int64, key string) *envelope.Event {
	e := ev(id, agg, version, amount)
	e.IdempotencyKey, e.Tenant, e.Operation = key, "tenant-1", "deposit"
	return e
}

func TestIdempotencyKey(t *testing.T) {
	forEachCorrect(t, nil, func(t *testing.T, in *Inbox, s Strategy) {
		first := keyed("req-1-ev", "acct-1", 1, 10, "k-1")
		expect(t, apply(t, in, s, consumer, first), Applied)
		// The client retried the request and it became a new event: same key,
		// same content → the stored result, no second effect.
		replay := keyed("req-1-retry-ev", "acct-1", 2, 10, "k-1")
		o := apply(t, in, s, consumer, replay)
		expect(t, o, Duplicate)
		if !strings.Contains(o.StoredResult, `"id":"req-1-ev"`) || !strings.Contains(o.StoredResult, `"APPLIED"`) {
			t.Fatalf("stored result %q does not name the first request's event", o.StoredResult)
		}
		// Same key, different amount: a conflict, rejected, no effect.
		expect(t, apply(t, in, s, consumer, keyed("req-1-other-ev", "acct-1", 2, 99, "k-1")), Conflict)
		wantAccount(t, in, "acct-1", 10, 1)
		// Rejections leave no inbox row: a row would claim an effect.
		wantInboxRows(t, in, 1)
		// The first event redelivered: dedup by the inbox, as always.
		expect(t, apply(t, in, s, consumer, first), Duplicate)
		// The same key in another tenant is another key.
		other := keyed("t2-ev", "acct-1", 2, 10, "k-1")
		other.Tenant = "tenant-2"
		expect(t, apply(t, in, s, consumer, other), Applied)
		wantAccount(t, in, "acct-1", 20, 2)
		// A rejected keyed event does not burn its key: a GAP (parking off
		// would also apply) or a park leaves the key free.
		parked := keyed("k2-ev", "acct-1", 4, 5, "k-2")
		expect(t, apply(t, in, s, consumer, parked), Parked)
		if n := count(t, in, `SELECT count(*) FROM %s.idempotency WHERE key = $1`, "k-2"); n != 0 {
			t.Fatalf("a parked event's key is claimed (%d rows)", n)
		}
		o = apply(t, in, s, consumer, keyed("k3-ev", "acct-1", 3, 1, "k-3"))
		expect(t, o, Applied)
		if len(o.Drained) != 1 || o.Drained[0].Result != Applied {
			t.Fatalf("drained %+v, want the keyed v4 applied", o.Drained)
		}
		wantAccount(t, in, "acct-1", 26, 4)
		expect(t, apply(t, in, s, consumer, keyed("k2-retry", "acct-1", 5, 5, "k-2")), Duplicate)
		wantAccount(t, in, "acct-1", 26, 4)
	})
}

func TestIdempotencyConflictWithParkingOff(t *testing.T) {
	forEachCorrect(t, parkingOff, func(t *testing.T, in *Inbox, s Strategy) {
		expect(t, apply(t, in, s, consumer, keyed("a", "acct-2", 2, 10, "k")), Gap)
		expect(t, apply(t, in, s, consumer, keyed("b", "acct-2", 1, 10, "k")), Applied)
		// The gap's key was not claimed, so the same content now replays b.
		expect(t, apply(t, in, s, consumer, keyed("a", "acct-2", 2, 10, "k")), Duplicate)
		expect(t, apply(t, in, s, consumer, keyed("c", "acct-2", 2, 11, "k")), Conflict)
		wantAccount(t, in, "acct-2", 10, 1)
	})
}

func TestSnapshots(t *testing.T) {
	forEachCorrect(t, nil, func(t *testing.T, in *Inbox, s Strategy) {
		expect(t, apply(t, in, s, consumer, snap("s5", "acct-s", 5, 500)), Applied)
		wantAccount(t, in, "acct-s", 500, 5)
		expect(t, apply(t, in, s, consumer, snap("s3", "acct-s", 3, 300)), Stale)     // older
		expect(t, apply(t, in, s, consumer, snap("s5b", "acct-s", 5, 555)), Stale)    // equal
		expect(t, apply(t, in, s, consumer, snap("s5", "acct-s", 5, 500)), Duplicate) // redelivery
		wantAccount(t, in, "acct-s", 500, 5)
		expect(t, apply(t, in, s, consumer, ev("i6", "acct-s", 6, 1)), Applied)
		wantAccount(t, in, "acct-s", 501, 6)
		// An increment waiting beyond a snapshot is drained by it; one the
		// snapshot overtook is removed as stale, not left behind.
		expect(t, apply(t, in, s, consumer, ev("i8", "acct-s", 8, 3)), Parked)
		expect(t, apply(t, in, s, consumer, ev("i12", "acct-s", 12, 7)), Parked)
		o := apply(t, in, s, consumer, snap("s11", "acct-s", 11, 1000))
		expect(t, o, Applied)
		got := map[string]Result{}
		for _, d := range o.Drained {
			got[d.ID] = d.Result
		}
		if got["i8"] != Stale || got["i12"] != Applied || len(got) != 2 {
			t.Fatalf("drained %v, want i8 STALE and i12 APPLIED", got)
		}
		wantAccount(t, in, "acct-s", 1007, 12)
		if p := parkedRows(t, in, consumer); p != 0 {
			t.Fatalf("parked=%d, want 0", p)
		}
		if n := inboxRows(t, in, consumer); n != 4 { // s5, i6, s11, i12
			t.Fatalf("inbox=%d, want 4", n)
		}
	})
}

func TestParkingBoundAndStuckParked(t *testing.T) {
	forEachCorrect(t, func(o *Options) { o.ParkMaxPerAggregate = 2 }, func(t *testing.T, in *Inbox, s Strategy) {
		expect(t, apply(t, in, s, consumer, ev("v3", "acct-p", 3, 3)), Parked)
		expect(t, apply(t, in, s, consumer, ev("v4", "acct-p", 4, 4)), Parked)
		o := apply(t, in, s, consumer, ev("v5", "acct-p", 5, 5))
		if o.Result != Gap || !o.ParkOverflow {
			t.Fatalf("v5 beyond the bound: %s overflow=%t, want GAP with ParkOverflow", o.Result, o.ParkOverflow)
		}
		// A parked event redelivered while the bound is full is still PARKED.
		expect(t, apply(t, in, s, consumer, ev("v4", "acct-p", 4, 4)), Parked)
		if c := in.Counters(); c.ParkOverflow != 1 {
			t.Fatalf("ParkOverflow=%d, want 1", c.ParkOverflow)
		}
		time.Sleep(20 * time.Millisecond)
		stuck, err := in.StuckParked(ctxT(t), 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(stuck) != 2 || stuck[0].Subject != "acct-p" || stuck[0].Version != 3 || stuck[1].Version != 4 {
			t.Fatalf("stuck %+v, want v3 and v4 of acct-p", stuck)
		}
		if none, err := in.StuckParked(ctxT(t), time.Hour); err != nil || len(none) != 0 {
			t.Fatalf("nothing is an hour old: %+v %v", none, err)
		}
		// The predecessors arrive: everything drains; v5 is redelivered.
		expect(t, apply(t, in, s, consumer, ev("v1", "acct-p", 1, 1)), Applied)
		o = apply(t, in, s, consumer, ev("v2", "acct-p", 2, 2))
		expect(t, o, Applied)
		if len(o.Drained) != 2 {
			t.Fatalf("drained %+v, want v3 and v4", o.Drained)
		}
		expect(t, apply(t, in, s, consumer, ev("v5", "acct-p", 5, 5)), Applied)
		wantAccount(t, in, "acct-p", 15, 5)
		wantInboxRows(t, in, 5)
	})
}

// A process that died between a one-statement apply and its drain leaves a
// drainable parked event; DrainParked recovers it.
func TestDrainParkedRecovers(t *testing.T) {
	in := newInbox(t, nil)
	s := mustStrategy(t, "tx")
	expect(t, apply(t, in, s, consumer, ev("v2", "acct-r", 2, 20)), Parked)
	// Simulate the crash: v1 applied without draining.
	q := fmt.Sprintf("%q", in.Schema())
	if _, err := in.pool.Exec(context.Background(), `UPDATE `+q+`.account SET balance = 10, version = 1 WHERE id = 'acct-r'`); err != nil {
		t.Fatal(err)
	}
	outs, err := in.DrainParked(ctxT(t), consumer)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].ID != "v2" || outs[0].Result != Applied {
		t.Fatalf("drained %+v, want v2 APPLIED", outs)
	}
	wantAccount(t, in, "acct-r", 30, 2)
	if n := inboxRows(t, in, consumer); n != 1 {
		t.Fatalf("inbox=%d, want 1 (the drained event's row)", n)
	}
}

func TestPruneAndStats(t *testing.T) {
	in := newInbox(t, nil)
	ctx := ctxT(t)
	st, err := in.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 0 || !st.Oldest.IsZero() || st.SizeBytes <= 0 {
		t.Fatalf("empty stats %+v", st)
	}
	s := mustStrategy(t, "batch")
	var evs []*envelope.Event
	for v := int64(1); v <= 10; v++ {
		evs = append(evs, ev(fmt.Sprintf("e%d", v), "acct-x", v, 1))
	}
	if _, err := s.ApplyBatch(ctx, in, consumer, evs); err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("%q", in.Schema())
	if _, err := in.pool.Exec(ctx, `UPDATE `+q+`.inbox SET applied_at = now() - interval '2 hours' WHERE aggregate_version <= 7`); err != nil {
		t.Fatal(err)
	}
	n, err := in.Prune(ctx, time.Hour, 2) // 7 rows in batches of 2: 2+2+2+1
	if err != nil || n != 7 {
		t.Fatalf("prune: %d, %v; want 7", n, err)
	}
	st, err = ReadStats(ctx, in.pool, in.Schema())
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 3 || time.Since(st.Oldest) > time.Minute || st.SizeBytes <= 0 {
		t.Fatalf("stats after prune %+v", st)
	}
	if r, err := ApplyRetention(ctx, in.pool, in.Schema(), time.Hour, 100); err != nil || r.Rows != 0 {
		t.Fatalf("second prune: %d, %v", r.Rows, err)
	}
	if _, err := ApplyRetention(ctx, in.pool, in.Schema(), 0, 100); err == nil {
		t.Fatal("prune with no retention bound must be refused")
	}
	if _, err := ApplyRetention(ctx, in.pool, in.Schema(), time.Hour, 0); err == nil {
		t.Fatal("prune with batch size 0 must be refused")
	}
	// Pruned rows are gone from dedup: that is why retention must cover
	// every redelivery window.
	expect(t, apply(t, in, s, consumer, evs[0]), Stale)
}

// holdLock keeps acct's row locked from another connection for d.
func holdLock(t *testing.T, in *Inbox, agg string, d time.Duration) (locked, done chan struct{}) {
	locked, done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		tx, err := in.pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			close(locked)
			return
		}
		var v int64
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT version FROM %q.account WHERE id = $1 FOR UPDATE`, in.Schema()), agg).Scan(&v); err != nil {
			t.Error(err)
		}
		close(locked)
		time.Sleep(d)
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
		}
	}()
	return locked, done
}

// A lock_timeout is retried, not dropped: the event applies once the
// holder lets go.
func TestLockTimeoutIsRetried(t *testing.T) {
	forEachCorrect(t, func(o *Options) {
		o.LockTimeout = 100 * time.Millisecond
		o.MaxAttempts = 100
		o.RetryBackoff, o.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	}, func(t *testing.T, in *Inbox, s Strategy) {
		resetAccount(t, in, consumer, order42)
		locked, done := holdLock(t, in, order42, 700*time.Millisecond)
		<-locked
		o := apply(t, in, s, consumer, ev("payment-recorded-42-1", order42, 1, 10))
		expect(t, o, Applied)
		<-done
		if o.Attempts < 2 || in.Counters().Retries < 1 {
			t.Fatalf("attempts=%d retries=%d: the lock timeout was not retried", o.Attempts, in.Counters().Retries)
		}
		wantAccount(t, in, order42, 10, 1)
		wantInboxRows(t, in, 1)
	})
}

// When the retries run out, the event fails with a retryable error and
// nothing of it commits; a later delivery applies it once.
func TestRetriesExhausted(t *testing.T) {
	forEachCorrect(t, func(o *Options) {
		o.LockTimeout = 50 * time.Millisecond
		o.MaxAttempts = 2
	}, func(t *testing.T, in *Inbox, s Strategy) {
		resetAccount(t, in, consumer, order42)
		locked, done := holdLock(t, in, order42, 600*time.Millisecond)
		<-locked
		e := ev("payment-recorded-42-1", order42, 1, 10)
		o, err := in.Apply(ctxT(t), s, consumer, e)
		if !errors.Is(err, ErrRetryable) || !errors.Is(o.Err, ErrRetryable) || o.Result != NoResult {
			t.Fatalf("result %s, err %v: want a retryable error and no result", o.Result, err)
		}
		if !strings.Contains(err.Error(), consumer) || !strings.Contains(err.Error(), e.ID) {
			t.Fatalf("error %q does not name the consumer and the event", err)
		}
		wantAccount(t, in, order42, 0, 0)
		if n := inboxRows(t, in, consumer); n != 0 {
			t.Fatalf("inbox=%d after a failed event, want 0", n)
		}
		<-done
		expect(t, apply(t, in, s, consumer, e), Applied)
		wantAccount(t, in, order42, 10, 1)
	})
}

func TestInvalidEvents(t *testing.T) {
	forEachCorrect(t, nil, func(t *testing.T, in *Inbox, s Strategy) {
		bad := ev("", "acct", 1, 1)
		good := ev("ok", "acct", 1, 1)
		outs, err := s.ApplyBatch(ctxT(t), in, consumer, []*envelope.Event{bad, good, nil})
		if !errors.Is(err, ErrInvalidEvent) || len(outs) != 3 {
			t.Fatalf("err %v (%d outcomes), want ErrInvalidEvent and 3 outcomes", err, len(outs))
		}
		if !errors.Is(outs[0].Err, ErrInvalidEvent) || !errors.Is(outs[2].Err, ErrInvalidEvent) {
			t.Fatalf("outcomes %+v", outs)
		}
		expect(t, outs[1], Applied) // one bad event costs the others nothing
	})
}

func TestMigrate(t *testing.T) {
	cfgIn := newInbox(t, nil) // provides a pool; we migrate other schemas on it
	ctx := ctxT(t)
	schema := testSchema(t)
	t.Cleanup(func() { _ = DropSchema(context.Background(), cfgIn.pool, schema) })
	var wg sync.WaitGroup
	applied := make([][]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() { applied[i], errs[i] = Migrate(ctx, cfgIn.pool, schema) })
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("concurrent migrate: %v", errs[i])
		}
		total += len(applied[i])
	}
	if total != len(Migrations()) {
		t.Fatalf("%d migrations applied across 4 concurrent runs, want %d once", total, len(Migrations()))
	}
	again, err := Migrate(ctx, cfgIn.pool, schema)
	if err != nil || len(again) != 0 {
		t.Fatalf("re-migrate: %v %v, want nothing to do", again, err)
	}
	var versions int
	if err := cfgIn.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.schema_migrations`, schema)).Scan(&versions); err != nil || versions != len(Migrations()) {
		t.Fatalf("schema_migrations has %d rows (%v)", versions, err)
	}
	for _, bad := range []string{"", "a;drop", "1abc", strings.Repeat("x", 64), `q"uote`} {
		if _, err := Migrate(ctx, cfgIn.pool, bad); err == nil {
			t.Errorf("schema %q accepted", bad)
		}
	}
	if _, err := New(cfgIn.pool, Options{Schema: schema, AccountTable: "x y"}); err == nil {
		t.Error("account table with a space accepted")
	}
}

func TestNewRequiresTimeouts(t *testing.T) {
	in := newInbox(t, nil)
	cfg := in.pool.Config()
	delete(cfg.ConnConfig.RuntimeParams, "lock_timeout")
	// pgxpool.Config is a copy; build a pool from it without connecting.
	p, err := pgxpoolNewLazy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := New(p, Options{}); err == nil || !strings.Contains(err.Error(), "ConfigurePool") {
		t.Fatalf("New without timeouts: %v", err)
	}
}

type failingTx struct{ pgx.Tx }

func (failingTx) Rollback(context.Context) error { return errors.New("connection reset") }

func TestRollbackFailureIsJoined(t *testing.T) {
	cause := errors.New("update account: boom")
	err := rollback(context.Background(), failingTx{}, cause)
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("got %v: the rollback failure must be joined to the original, not replace it", err)
	}
}

func TestOpen(t *testing.T) {
	cfg := testenvConfig(t)
	schema := testSchema(t)
	in, err := Open(ctxT(t), cfg, Options{Schema: schema, LockTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	defer func() { _ = DropSchema(context.Background(), in.Pool(), schema) }()
	if _, err := Migrate(ctxT(t), in.Pool(), schema); err != nil {
		t.Fatal(err)
	}
	var lt string
	if err := in.Pool().QueryRow(ctxT(t), "SHOW lock_timeout").Scan(&lt); err != nil || lt != "1500ms" {
		t.Fatalf("lock_timeout %q (%v), want 1500ms", lt, err)
	}
	expect(t, apply(t, in, mustStrategy(t, "cte"), consumer, ev("e1", "a", 1, 1)), Applied)
	if _, err := Open(ctxT(t), "::not a url", Options{}); err == nil {
		t.Fatal("bad URL accepted")
	}
}
