package inbox

import (
	"context"
	"testing"
	"time"
)

// TestPrefillThenRunThenRetention: history loaded into a plain and a
// partitioned inbox spans its age, interleaves with the run's keys
// without colliding, is invisible to the checker's snapshot, leaves the
// strategies working, and retention keeping part of it removes the rest
// but never the run's own rows.
func TestPrefillThenRunThenRetention(t *testing.T) {
	for _, layout := range []Layout{{}, {Partitioned: true}} {
		t.Run(map[bool]string{false: "plain", true: "partitioned"}[layout.Partitioned], func(t *testing.T) {
			in := newInboxLayout(t, layout, nil)
			ctx := context.Background()
			first := ev("acct-000001-v1", "acct-000001", 1, 5)
			now := time.Now()
			p := Prefill{Rows: 3000, Age: 30 * 24 * time.Hour, Aggregates: 10, Consumer: "c", Source: first.Source,
				AppliedBefore: now, EventTimeBefore: first.Time}
			if err := p.Load(ctx, in.pool, in.Schema()); err != nil {
				t.Fatal(err)
			}
			if n := inboxRows(t, in, "c"); n != 3000 {
				t.Fatalf("%d rows after prefill, want 3000", n)
			}
			var minApplied, maxApplied, minTime, maxTime time.Time
			var aggs, ids int64
			if err := in.pool.QueryRow(ctx, `SELECT min(applied_at), max(applied_at), min(event_time), max(event_time),
				count(DISTINCT aggregate_id), count(DISTINCT event_id) FROM `+in.Schema()+`.inbox WHERE aggregate_version = 0`).
				Scan(&minApplied, &maxApplied, &minTime, &maxTime, &aggs, &ids); err != nil {
				t.Fatal(err)
			}
			day := 24 * time.Hour
			if now.Sub(minApplied) < 29*day || now.Sub(maxApplied) > time.Hour || first.Time.Sub(minTime) < 29*day || !maxTime.Before(first.Time) {
				t.Errorf("history spans applied %s..%s, event time %s..%s: want 30 days ending now and at the first event",
					minApplied, maxApplied, minTime, maxTime)
			}
			if aggs != 10 || ids != 3000 {
				t.Errorf("%d aggregates, %d distinct ids: want the 10 aggregates and 3000 ids", aggs, ids)
			}
			s := mustStrategy(t, "batch")
			for v := int64(1); v <= 3; v++ {
				e := ev("acct-000001-v"+string(rune('0'+v)), "acct-000001", v, 5)
				e.Time = first.Time.Add(time.Duration(v) * time.Second)
				expect(t, apply(t, in, s, "c", e), Applied)
			}
			wantAccount(t, in, "acct-000001", 15, 3)
			snap, err := ReadSnapshot(ctx, in.pool, in.Schema(), "c", false)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Inbox) != 3 {
				t.Errorf("the checker's snapshot holds %d inbox rows, want the run's 3 (history is not the run's)", len(snap.Inbox))
			}
			olderThan := 7 * day
			if layout.Partitioned {
				olderThan += time.Since(first.Time)
			}
			r, err := ApplyRetention(ctx, in.pool, in.Schema(), olderThan, 500)
			if err != nil {
				t.Fatal(err)
			}
			left := inboxRows(t, in, "c")
			if r.Rows < 2000 || left > 1000 || left != 3003-r.Rows {
				t.Errorf("retention keeping 7 of 30 days removed %d rows, left %d", r.Rows, left)
			}
			if n := count(t, in, `SELECT count(*) FROM %s.inbox WHERE aggregate_version > 0`); n != 3 {
				t.Errorf("retention removed the run's own rows: %d of 3 left", n)
			}
		})
	}
}

func TestPrefillRefusesNonsense(t *testing.T) {
	in := newInbox(t, nil)
	if err := (Prefill{Rows: 10, Aggregates: 1}).Load(context.Background(), in.pool, in.Schema()); err == nil {
		t.Fatal("a prefill without an age was accepted")
	}
}
