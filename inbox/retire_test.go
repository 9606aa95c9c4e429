package inbox

import (
	"fmt"
	"testing"
)

// TestRetireStopsAutovacuum: after Retire, no table of the schema is left
// to autovacuum, on either layout, and the tables still answer queries.
func TestRetireStopsAutovacuum(t *testing.T) {
	for name, layout := range map[string]Layout{"plain": {}, "partitioned": {Partitioned: true}} {
		t.Run(name, func(t *testing.T) {
			in := newInboxLayout(t, layout, nil)
			ctx := ctxT(t)
			if err := Retire(ctx, in.Pool(), in.Schema()); err != nil {
				t.Fatal(err)
			}
			var tables, on int
			err := in.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT coalesce(c.reloptions @> '{autovacuum_enabled=false}', false))
				FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, in.Schema()).Scan(&tables, &on)
			if err != nil {
				t.Fatal(err)
			}
			if tables < 3 || on != 0 {
				t.Fatalf("%d tables, %d still under autovacuum", tables, on)
			}
			if _, err := in.Pool().Exec(ctx, fmt.Sprintf("SELECT count(*) FROM %q.inbox", in.Schema())); err != nil {
				t.Fatal(err)
			}
			if err := Retire(ctx, in.Pool(), "bad schema; --"); err == nil {
				t.Fatal("Retire accepted an invalid schema name")
			}
		})
	}
}

// TestAnalyzeGivesThePlannerTheInbox: on a table never analysed, the
// planner guesses that a fraction of a percent of the inbox belongs to its
// consumer (the guess that made the batch.sql example hash the whole
// inbox for every batch); after Analyze it knows all of it does.
func TestAnalyzeGivesThePlannerTheInbox(t *testing.T) {
	in := newInboxLayout(t, Layout{}, nil)
	ctx := ctxT(t)
	db := in.Pool()
	// Autovacuum off, so that only Analyze can gather the statistics.
	if err := Retire(ctx, db, in.Schema()); err != nil {
		t.Fatal(err)
	}
	const rows = 20000
	if _, err := db.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
		SELECT 'c', 's', 'e' || k, 'a' || (k %% 100), k, now() FROM generate_series(1, %d) AS k`, in.Schema(), rows)); err != nil {
		t.Fatal(err)
	}
	estimate := func() float64 {
		var plan []map[string]any
		if err := db.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (FORMAT JSON) SELECT 1 FROM %q.inbox WHERE consumer = 'c'`, in.Schema())).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		return plan[0]["Plan"].(map[string]any)["Plan Rows"].(float64)
	}
	if before := estimate(); before > rows/10 {
		t.Fatalf("before Analyze the planner already estimates %.0f of %d rows for the consumer: the test shows nothing", before, rows)
	}
	if err := Analyze(ctx, db, in.Schema()); err != nil {
		t.Fatal(err)
	}
	if after := estimate(); after < rows*9/10 {
		t.Fatalf("after Analyze the planner estimates %.0f of %d rows for the consumer", after, rows)
	}
	if err := Analyze(ctx, db, "bad schema; --"); err == nil {
		t.Fatal("Analyze accepted an invalid schema name")
	}
}
