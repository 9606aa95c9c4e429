package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
)

// daily is the partitioned layout with its defaults.
var daily = Layout{Partitioned: true}

// The article's experiments, unchanged, on the partitioned layout.
func TestPartitionedExperiments(t *testing.T) {
	t.Run("duplicate", func(t *testing.T) { forEachCorrectLayout(t, daily, nil, experimentDuplicate) })
	t.Run("concurrent", func(t *testing.T) { forEachCorrectLayout(t, daily, nil, experimentConcurrent) })
	t.Run("order", func(t *testing.T) { forEachCorrectLayout(t, daily, parkingOff, experimentOrder) })
	t.Run("order-parked", func(t *testing.T) { forEachCorrectLayout(t, daily, nil, experimentOrderParked) })
}

// at is an increment of its own aggregate (version 1) with event time t.
func at(id string, t time.Time) *envelope.Event {
	e := ev(id, "acct-"+id, 1, 10)
	e.Time = t
	return e
}

// partitionOf names the partition holding the inbox row of id.
func partitionOf(t *testing.T, in *Inbox, id string) string {
	t.Helper()
	var name string
	q := fmt.Sprintf(`SELECT c.relname::text FROM %q.inbox i JOIN pg_class c ON c.oid = i.tableoid WHERE i.event_id = $1`, in.opt.Schema)
	if err := in.pool.QueryRow(context.Background(), q, id).Scan(&name); err != nil {
		t.Fatalf("partition of %s: %v", id, err)
	}
	return name
}

// TestPartitionedRedeliveryDaysLater: the partition follows the event's
// time, not the day it is applied, so a copy arriving days later meets the
// first one's row.
func TestPartitionedRedeliveryDaysLater(t *testing.T) {
	forEachCorrectLayout(t, daily, nil, func(t *testing.T, in *Inbox, s Strategy) {
		ctx := ctxT(t)
		e := ev("payment-recorded-42-1", order42, 1, 10)
		expect(t, apply(t, in, s, consumer, e), Applied)
		if p := partitionOf(t, in, e.ID); p != "inbox_p20260102" {
			t.Fatalf("row in partition %s, want inbox_p20260102 (the event's day)", p)
		}
		// Three days pass: the row was applied long ago and the following
		// days' partitions exist.
		if _, err := in.pool.Exec(ctx, fmt.Sprintf(`UPDATE %q.inbox SET applied_at = applied_at - interval '3 days'`, in.opt.Schema)); err != nil {
			t.Fatal(err)
		}
		if _, err := CreatePartitions(ctx, in.pool, in.opt.Schema, e.Time, e.Time.Add(72*time.Hour)); err != nil {
			t.Fatal(err)
		}
		again := *e
		again.Attempt, again.IntendedAt = 3, time.Now()
		expect(t, apply(t, in, s, consumer, &again), Duplicate)
		wantAccount(t, in, order42, 10, 1)
		wantInboxRows(t, in, 1)
		// The documented limit: a copy whose time differs is another key.
		// The inbox does not see a duplicate; here only the version guard
		// keeps the effect single.
		moved := *e
		moved.Time = e.Time.Add(48 * time.Hour)
		expect(t, apply(t, in, s, consumer, &moved), Stale)
		wantAccount(t, in, order42, 10, 1)
		if n := inboxRows(t, in, consumer); n != 1 {
			t.Fatalf("inbox=%d after the moved copy, want 1 (its claim rolls back)", n)
		}
	})
}

// TestDropPartitions: retention drops exactly the partitions entirely
// older than the cutoff, with their rows, and keeps the rest.
func TestDropPartitions(t *testing.T) {
	in := newInboxLayout(t, daily, nil)
	ctx := ctxT(t)
	s := mustStrategy(t, "batch")
	day := 24 * time.Hour
	now := time.Now().UTC()
	dayA, dayB := now.Add(-10*day), now.Add(-9*day)
	evs := []*envelope.Event{at("a1", dayA), at("a2", dayA), at("a3", dayA), at("b1", dayB), at("b2", dayB), at("c1", now)}
	outs, err := s.ApplyBatch(ctx, in, consumer, evs)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		expect(t, o, Applied)
	}
	before, err := ListPartitions(ctx, in.pool, in.Schema())
	if err != nil {
		t.Fatal(err)
	}
	// Today and 7 ahead from the migration, days A and B made on demand.
	if len(before) != 10 {
		t.Fatalf("%d partitions before retention, want 10: %+v", len(before), before)
	}

	r, err := ApplyRetention(ctx, in.pool, in.Schema(), 5*day, 100)
	if err != nil {
		t.Fatal(err)
	}
	nameA, nameB := partitionName(partitionStart(dayA, day), day), partitionName(partitionStart(dayB, day), day)
	if !r.Partitioned || len(r.Dropped) != 2 || r.Rows != 5 ||
		r.Dropped[0].Name != nameA || r.Dropped[0].Rows != 3 || r.Dropped[1].Name != nameB || r.Dropped[1].Rows != 2 {
		t.Fatalf("retention %+v: want %s (3 rows) and %s (2 rows) dropped", r, nameA, nameB)
	}
	if !r.Dropped[0].From.Equal(partitionStart(dayA, day)) || !r.Dropped[1].To.Equal(partitionStart(dayB, day).Add(day)) {
		t.Fatalf("dropped bounds %+v", r.Dropped)
	}
	after, err := ListPartitions(ctx, in.pool, in.Schema())
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 8 || after[0].Name != partitionName(partitionStart(now, day), day) {
		t.Fatalf("partitions after retention %+v, want today's and the 7 ahead", after)
	}
	if n := inboxRows(t, in, consumer); n != 1 {
		t.Fatalf("inbox=%d after retention, want 1 (c1)", n)
	}
	expect(t, apply(t, in, s, consumer, evs[5]), Duplicate)

	p, ok, err := ReadPartitioning(ctx, in.pool, in.Schema())
	if err != nil || !ok || p.Interval != day || !p.Horizon.Equal(r.Dropped[1].To) {
		t.Fatalf("partitioning %+v %t %v: want the horizon at %s", p, ok, err, r.Dropped[1].To)
	}
	st, err := in.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Partitioned || st.Partitions != 8 || st.Rows != 1 || st.SizeBytes <= 0 || !st.Horizon.Equal(p.Horizon) ||
		!st.PartitionsFrom.Equal(after[0].From) || !st.PartitionsTo.Equal(after[7].To) || st.PartitionInterval != day {
		t.Fatalf("stats %+v", st)
	}
	if r, err := ApplyRetention(ctx, in.pool, in.Schema(), 5*day, 100); err != nil || len(r.Dropped) != 0 || r.Rows != 0 {
		t.Fatalf("second pass: %+v, %v; want nothing dropped", r, err)
	}
	if _, err := DropPartitions(ctx, in.pool, in.Schema(), 0); err == nil {
		t.Fatal("dropping with no retention bound must be refused")
	}
}

// TestBeyondRetention: without a DEFAULT partition, an old event gets its
// partition made while nothing of its range was forgotten; once the range
// was dropped, the event (again, or any other of that age) is an error,
// never applied and never a decided result to ack.
func TestBeyondRetention(t *testing.T) {
	forEachCorrectLayout(t, daily, nil, func(t *testing.T, in *Inbox, s Strategy) {
		ctx := ctxT(t)
		now := time.Now().UTC()
		old := at("old-1", now.Add(-30*24*time.Hour))
		expect(t, apply(t, in, s, consumer, old), Applied)
		dropped, err := DropPartitions(ctx, in.pool, in.Schema(), 7*24*time.Hour)
		if err != nil || len(dropped) != 1 || dropped[0].Rows != 1 {
			t.Fatalf("dropped %+v, %v; want old-1's partition with 1 row", dropped, err)
		}
		// This Inbox still believes the partition exists: the insert finds
		// none, and the retry learns about the horizon.
		retries := in.Counters().Retries
		for _, e := range []*envelope.Event{old, at("older-2", now.Add(-60*24*time.Hour))} {
			o, err := in.Apply(ctx, s, consumer, e)
			if !errors.Is(err, ErrBeyondRetention) || !errors.Is(o.Err, ErrBeyondRetention) || o.Result != NoResult {
				t.Fatalf("%s: result %s, err %v; want no result and ErrBeyondRetention", e.ID, o.Result, o.Err)
			}
			if errors.Is(o.Err, ErrRetryable) {
				t.Fatalf("%s: %v is marked retryable: retrying cannot bring the partition back", e.ID, o.Err)
			}
		}
		if in.Counters().Retries == retries {
			t.Fatal("no retry: the insert into the dropped range should have failed once before the horizon was learnt")
		}
		wantAccount(t, in, "acct-old-1", 10, 1)
		if got := account(t, in, "acct-older-2"); got.Balance != 0 || got.Version != 0 {
			t.Fatalf("acct-older-2 %+v: nothing may be applied", got)
		}
		wantInboxRows(t, in, 0)
		// Ranges after the horizon still get partitions on demand.
		expect(t, apply(t, in, s, consumer, at("new-3", now.Add(-2*24*time.Hour))), Applied)
	})
}

// TestPartitionedEventWithoutTime: an event with no time cannot be placed
// in a partitioned inbox; it is an error, nothing is written.
func TestPartitionedEventWithoutTime(t *testing.T) {
	forEachCorrectLayout(t, daily, nil, func(t *testing.T, in *Inbox, s Strategy) {
		e := at("untimed", time.Time{})
		o, err := in.Apply(ctxT(t), s, consumer, e)
		if !errors.Is(err, ErrInvalidEvent) || o.Result != NoResult {
			t.Fatalf("result %s, err %v; want no result and ErrInvalidEvent", o.Result, err)
		}
		wantInboxRows(t, in, 0)
	})
}

// TestPlainEventWithoutTime: the plain layout still takes events without a
// time (event_time NULL), including the paths that withdraw a claim.
func TestPlainEventWithoutTime(t *testing.T) {
	untimed := func(id string, v int64) *envelope.Event {
		e := ev(id, "acct-u", v, 10*v)
		e.Time = time.Time{}
		return e
	}
	forEachCorrect(t, nil, func(t *testing.T, in *Inbox, s Strategy) {
		e1, e2 := untimed("u1", 1), untimed("u2", 2)
		expect(t, apply(t, in, s, consumer, e2), Parked)
		if n := inboxRows(t, in, consumer); n != 0 {
			t.Fatalf("inbox=%d after parking, want 0 (the claim is withdrawn)", n)
		}
		o := apply(t, in, s, consumer, e1)
		expect(t, o, Applied)
		if len(o.Drained) != 1 || o.Drained[0].Result != Applied {
			t.Fatalf("drained %+v", o.Drained)
		}
		expect(t, apply(t, in, s, consumer, e2), Duplicate)
		expect(t, apply(t, in, s, consumer, untimed("u1-again", 1)), Stale)
		wantAccount(t, in, "acct-u", 30, 2)
		if n := count(t, in, `SELECT count(*) FROM %s.inbox WHERE event_time IS NULL`); n != 2 {
			t.Fatalf("%d rows without event time, want 2", n)
		}
	})
}

// TestPartitionsOnDemandConcurrently: many deliveries into ranges that
// have no partition yet; each range is created once and nothing fails.
func TestPartitionsOnDemandConcurrently(t *testing.T) {
	in := newInboxLayout(t, Layout{Partitioned: true, Interval: time.Hour, Ahead: 1}, nil)
	ctx := ctxT(t)
	s := mustStrategy(t, "cte")
	base := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 6 {
				e := at(fmt.Sprintf("g%d-%d", g, i), base.Add(time.Duration(i%3)*time.Hour+time.Duration(g)*time.Second))
				if o, err := in.Apply(ctx, s, consumer, e); err != nil || o.Result != Applied {
					t.Errorf("%s: %s, %v", e.ID, o.Result, err)
				}
			}
		})
	}
	wg.Wait()
	parts, err := ListPartitions(ctx, in.pool, in.Schema())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		if strings.HasPrefix(p.Name, "inbox_p20300501") {
			names = append(names, p.Name)
		}
	}
	if strings.Join(names, ",") != "inbox_p20300501_1000,inbox_p20300501_1100,inbox_p20300501_1200" {
		t.Fatalf("partitions %v", names)
	}
	wantInboxRows(t, in, 96)
}

func TestMigrateLayout(t *testing.T) {
	ctx := ctxT(t)
	plain := newInbox(t, nil)
	if _, err := MigrateLayout(ctx, plain.pool, plain.Schema(), daily); err == nil || !strings.Contains(err.Error(), "plain") {
		t.Fatalf("partitioning an existing plain schema: %v, want a refusal", err)
	}
	if _, ok, err := ReadPartitioning(ctx, plain.pool, plain.Schema()); ok || err != nil {
		t.Fatalf("plain schema reads as partitioned=%t (%v)", ok, err)
	}
	if r, err := ApplyRetention(ctx, plain.pool, plain.Schema(), time.Hour, 10); err != nil || r.Partitioned {
		t.Fatalf("plain retention %+v, %v", r, err)
	}

	in := newInboxLayout(t, daily, nil)
	for _, l := range []Layout{daily, {Partitioned: true, Interval: 24 * time.Hour}, {}} {
		if applied, err := MigrateLayout(ctx, in.pool, in.Schema(), l); err != nil || len(applied) != 0 {
			t.Fatalf("migrating again with %+v: applied %v, %v", l, applied, err)
		}
	}
	if _, err := MigrateLayout(ctx, in.pool, in.Schema(), Layout{Partitioned: true, Interval: time.Hour}); err == nil {
		t.Fatal("changing the interval of a partitioned schema must be refused")
	}
	for _, iv := range []time.Duration{30 * time.Second, 90 * time.Second, 400 * 24 * time.Hour} {
		if _, err := MigrateLayout(ctx, in.pool, "t_never_created", Layout{Partitioned: true, Interval: iv}); err == nil {
			t.Fatalf("interval %v accepted", iv)
		}
	}
	var versions int
	if err := in.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.schema_migrations`, in.Schema())).Scan(&versions); err != nil || versions != len(Migrations()) {
		t.Fatalf("schema_migrations has %d rows (%v)", versions, err)
	}
}

// TestMigrateFromVersion1: a schema made before event_time existed is
// upgraded in place and keeps working.
func TestMigrateFromVersion1(t *testing.T) {
	in := newInbox(t, nil)
	ctx := ctxT(t)
	s := mustStrategy(t, "tx")
	q := fmt.Sprintf("%q", in.Schema())
	expect(t, apply(t, in, s, consumer, ev("v1-1", "acct-m", 1, 1)), Applied)
	for _, stmt := range []string{
		`ALTER TABLE ` + q + `.inbox DROP COLUMN event_time`,
		`DELETE FROM ` + q + `.schema_migrations WHERE version >= 2`,
	} {
		if _, err := in.pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := Migrate(ctx, in.pool, in.Schema())
	if err != nil || len(applied) == 0 || applied[0] != 2 {
		t.Fatalf("upgrade applied %v, %v; want from 2 on", applied, err)
	}
	// A fresh Inbox, as a restarted process would have (statements are
	// cached per connection and name event_time now).
	in2, err := New(in.pool, in.Options())
	if err != nil {
		t.Fatal(err)
	}
	expect(t, apply(t, in2, s, consumer, ev("v1-1", "acct-m", 1, 1)), Duplicate)
	expect(t, apply(t, in2, s, consumer, ev("v1-2", "acct-m", 2, 1)), Applied)
	if n := count(t, in, `SELECT count(*) FROM %s.inbox WHERE event_time IS NULL`); n != 1 {
		t.Fatalf("%d rows without event time, want 1 (the one from before the upgrade)", n)
	}
}

func TestPartitionArithmetic(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		t    time.Time
		iv   time.Duration
		want string
	}{
		{time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), day, "inbox_p20260102"},
		{time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), day, "inbox_p20260102"},
		{time.Date(2026, 1, 1, 23, 59, 59, 999999999, time.UTC), day, "inbox_p20260101"},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 5*3600)), day, "inbox_p20260101"},
		{time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), day, "inbox_p19691231"},
		{time.Date(1969, 12, 31, 23, 59, 59, 500, time.UTC), time.Hour, "inbox_p19691231_2300"},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 15 * time.Minute, "inbox_p20260102_0300"},
	} {
		start := partitionStart(tc.t, tc.iv)
		if got := partitionName(start, tc.iv); got != tc.want || start.After(tc.t) || !start.Add(tc.iv).After(tc.t) {
			t.Errorf("%s by %v: start %s name %s, want %s", tc.t, tc.iv, start, got, tc.want)
		}
	}
	e := ev("x", "y", 1, 1)
	e.Time = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("X", -3600))
	if got, want := string(eventTimeText(e)), "2026-01-02T04:04:05.123456Z"; got != want || !eventTime(e).Equal(time.Date(2026, 1, 2, 4, 4, 5, 123456000, time.UTC)) {
		t.Fatalf("event time %s / %s, want %s", got, eventTime(e), want)
	}
	e.Time = time.Time{}
	if eventTime(e) != nil || eventTimeText(e) != nil {
		t.Fatal("an event without time must be written as NULL")
	}
}

// TestStrategyFilePartitioned: a strategy file whose claim writes
// :event_time runs on the partitioned inbox; the partition is made for it.
func TestStrategyFilePartitioned(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(examplesDir, "tx.sql"))
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(b), `INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version)`, `INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version, :event_time)`, 1)
	if src == string(b) {
		t.Fatal("tx.sql's claim changed: update this test")
	}
	path := filepath.Join(t.TempDir(), "tx-partitioned.sql")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	in := newInboxLayout(t, daily, parkingOff)
	s, err := LoadStrategyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctxT(t), in.Pool(), in.Schema()); err != nil {
		t.Fatal(err)
	}
	experimentDuplicate(t, in, s)
	if p := partitionOf(t, in, "payment-recorded-42-1"); p != "inbox_p20260102" {
		t.Fatalf("row in partition %s", p)
	}
}
