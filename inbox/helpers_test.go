package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// correct lists the strategies every experiment must pass.
var correct = []string{"tx", "cte", "batch", "pipeline"}

var schemaSeq atomic.Int64

// testSchema is a schema name unique to this test, process and call, so
// packages and tests can share one database.
func testSchema(t testing.TB) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 36 {
		name = name[len(name)-36:]
	}
	return fmt.Sprintf("t_%s_%d_%d", strings.Trim(name, "_"), os.Getpid()%100000, schemaSeq.Add(1))
}

// newInbox migrates a fresh schema and returns an Inbox on it; the schema
// is dropped when the test ends.
func newInbox(t testing.TB, mutate func(*Options)) *Inbox {
	t.Helper()
	return newInboxLayout(t, Layout{}, mutate)
}

// newInboxLayout is newInbox with the schema created in layout.
func newInboxLayout(t testing.TB, layout Layout, mutate func(*Options)) *Inbox {
	t.Helper()
	cfg := testenv.Require(t, testenv.Postgres)
	opt := Options{Schema: testSchema(t)}
	if mutate != nil {
		mutate(&opt)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.PGURL)
	if err != nil {
		t.Fatalf("parse INBOXBENCH_PG_URL: %v", err)
	}
	ConfigurePool(pcfg, opt)
	pcfg.MaxConns = 40
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if _, err := MigrateLayout(ctx, pool, opt.Schema, layout); err != nil {
		pool.Close()
		t.Fatalf("migrate: %v", err)
	}
	in, err := New(pool, opt)
	if err != nil {
		pool.Close()
		t.Fatalf("new inbox: %v", err)
	}
	t.Cleanup(func() {
		if err := DropSchema(context.Background(), pool, opt.Schema); err != nil {
			t.Errorf("drop schema: %v", err)
		}
		pool.Close()
	})
	return in
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ev builds an increment event.
func ev(id, agg string, version, amount int64) *envelope.Event {
	return &envelope.Event{
		SpecVersion: envelope.SpecVersion, Source: "urn:inboxbench:test", ID: id, Type: "payment.recorded",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Subject: agg, AggregateVersion: version,
		Kind: envelope.Increment, Amount: amount,
	}
}

func snap(id, agg string, version, balance int64) *envelope.Event {
	e := ev(id, agg, version, balance)
	e.Kind = envelope.Snapshot
	return e
}

func mustStrategy(t testing.TB, name string) Strategy {
	t.Helper()
	s, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apply applies one event and fails the test on an undecided outcome.
func apply(t testing.TB, in *Inbox, s Strategy, consumer string, e *envelope.Event) Outcome {
	t.Helper()
	o, err := in.Apply(ctxT(t), s, consumer, e)
	if err != nil {
		t.Fatalf("%s: apply %s (%s v%d): %v", s.Name(), e.ID, e.Subject, e.AggregateVersion, err)
	}
	return o
}

func expect(t testing.TB, o Outcome, want Result) {
	t.Helper()
	if o.Result != want || o.Err != nil {
		t.Fatalf("event %s (%s v%d): got %s (err %v), want %s", o.ID, o.Subject, o.Version, o.Result, o.Err, want)
	}
}

type accountState struct {
	Balance, Version int64
	Exists           bool
}

func account(t testing.TB, in *Inbox, agg string) accountState {
	t.Helper()
	return accountIn(t, in, in.opt.AccountTable, agg)
}

func accountIn(t testing.TB, in *Inbox, table, agg string) accountState {
	t.Helper()
	var s accountState
	err := in.pool.QueryRow(context.Background(),
		fmt.Sprintf(`SELECT balance, version FROM %q.%q WHERE id = $1`, in.opt.Schema, table), agg).Scan(&s.Balance, &s.Version)
	if err == nil {
		s.Exists = true
	} else if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("read account %s: %v", agg, err)
	}
	return s
}

func wantAccount(t testing.TB, in *Inbox, agg string, balance, version int64) {
	t.Helper()
	if got := account(t, in, agg); got.Balance != balance || got.Version != version {
		t.Fatalf("account %s: balance=%d version=%d, want balance=%d version=%d", agg, got.Balance, got.Version, balance, version)
	}
}

// wantInboxRows fails t unless the inbox of consumer holds want rows.
func wantInboxRows(t testing.TB, in *Inbox, want int64) {
	t.Helper()
	if n := inboxRows(t, in, consumer); n != want {
		t.Fatalf("inbox=%d, want %d", n, want)
	}
}

func count(t testing.TB, in *Inbox, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := in.pool.QueryRow(context.Background(), fmt.Sprintf(query, fmt.Sprintf("%q", in.opt.Schema)), args...).Scan(&n); err != nil {
		t.Fatalf("count (%s): %v", query, err)
	}
	return n
}

func inboxRows(t testing.TB, in *Inbox, consumer string) int64 {
	t.Helper()
	return count(t, in, `SELECT count(*) FROM %s.inbox WHERE consumer = $1`, consumer)
}

func parkedRows(t testing.TB, in *Inbox, consumer string) int64 {
	t.Helper()
	return count(t, in, `SELECT count(*) FROM %s.parked WHERE consumer = $1`, consumer)
}

// resetOrder42 is the article's reset: empty inbox for the consumer,
// order-42 at balance 0, version 0.
func resetAccount(t testing.TB, in *Inbox, consumer, agg string) {
	t.Helper()
	ctx := context.Background()
	q := fmt.Sprintf("%q", in.opt.Schema)
	for _, s := range []string{
		`DELETE FROM ` + q + `.inbox WHERE consumer = $1`,
		`DELETE FROM ` + q + `.parked WHERE consumer = $1`,
	} {
		if _, err := in.pool.Exec(ctx, s, consumer); err != nil {
			t.Fatalf("reset: %v", err)
		}
	}
	if _, err := in.pool.Exec(ctx, `INSERT INTO `+q+`.account (id, balance, version) VALUES ($1, 0, 0)
		ON CONFLICT (id) DO UPDATE SET balance = 0, version = 0`, agg); err != nil {
		t.Fatalf("reset account: %v", err)
	}
}

// forEachCorrect runs f as a subtest per correct strategy, each with its
// own schema.
func forEachCorrect(t *testing.T, mutate func(*Options), f func(t *testing.T, in *Inbox, s Strategy)) {
	forEachCorrectLayout(t, Layout{}, mutate, f)
}

// forEachCorrectLayout is forEachCorrect with schemas in layout.
func forEachCorrectLayout(t *testing.T, layout Layout, mutate func(*Options), f func(t *testing.T, in *Inbox, s Strategy)) {
	for _, name := range correct {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := newInboxLayout(t, layout, mutate)
			f(t, in, mustStrategy(t, name))
		})
	}
}

func parkingOff(o *Options) { o.DisableParking = true }

func testenvConfig(t testing.TB) string {
	return testenv.Require(t, testenv.Postgres).PGURL
}
