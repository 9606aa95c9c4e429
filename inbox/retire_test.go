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
