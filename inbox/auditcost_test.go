package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// auditBefore is the audit as it was before it was made cheap: a logged
// table with a bigserial primary key, a row trigger writing old and new
// state. Kept here only to measure against.
const auditBefore = `
CREATE TABLE %[1]s.account_audit (seq bigserial PRIMARY KEY, aggregate_id text NOT NULL,
    old_version bigint NOT NULL, new_version bigint NOT NULL, old_balance bigint NOT NULL, new_balance bigint NOT NULL);
CREATE FUNCTION %[1]s.account_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.version <> 0 OR NEW.balance <> 0 THEN
            INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
            VALUES (NEW.id, 0, NEW.version, 0, NEW.balance);
        END IF;
    ELSIF OLD.version IS DISTINCT FROM NEW.version OR OLD.balance IS DISTINCT FROM NEW.balance THEN
        INSERT INTO %[1]s.account_audit (aggregate_id, old_version, new_version, old_balance, new_balance)
        VALUES (NEW.id, OLD.version, NEW.version, OLD.balance, NEW.balance);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER account_audit AFTER INSERT OR UPDATE ON %[1]s.account FOR EACH ROW EXECUTE FUNCTION %[1]s.account_audit_fn();`

// auditCostShapes are the statements measured, as PL/pgSQL run in a loop
// of n for schema {S}; {I} numbers the iteration.
var auditCostShapes = []struct{ name, body string }{
	{"update-1-row", `UPDATE {S}.account SET balance = balance + 1, version = version + 1
		WHERE id = 'acct-' || lpad(({I} % 8000)::text, 6, '0');`},
	{"update-100-rows", `UPDATE {S}.account a SET balance = a.balance + 1, version = a.version + 1
		FROM unnest(ARRAY(SELECT 'acct-' || lpad((({I} * 100 + k) % 8000)::text, 6, '0') FROM generate_series(0, 99) k)) d(id)
		WHERE a.id = d.id;`},
	// The tx strategy's transaction without the network: the guarded
	// claim, the update, the drain check and the commit (synchronous_commit
	// off: the CPU, not the disk).
	{"tx-event", `WITH p AS (SELECT EXISTS (SELECT 1 FROM {S}.parked WHERE consumer = 'c' AND source = 's' AND event_id = 'e' || {I}) AS parked),
			ins AS (INSERT INTO {S}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
				SELECT 'c', 's', 'e' || {I}, 'acct-' || lpad(({I} % 8000)::text, 6, '0'), 1, now() FROM p WHERE NOT p.parked
				ON CONFLICT DO NOTHING RETURNING 1)
			SELECT (SELECT parked FROM p), EXISTS (SELECT 1 FROM ins) INTO x, y;
		UPDATE {S}.account SET balance = balance + 5, version = version + 1 WHERE id = 'acct-' || lpad(({I} % 8000)::text, 6, '0');
		PERFORM EXISTS (SELECT 1 FROM {S}.parked WHERE consumer = 'c' AND aggregate_id = 'acct-' || lpad(({I} % 8000)::text, 6, '0'));
		COMMIT;`},
}

// BenchmarkAuditCost measures what each audit costs per statement, inside
// the server, finely interleaved so that a busy machine slows every
// variant alike: each iteration runs every shape for every variant in
// turn, starting with another one each time (one PL/pgSQL block, 50
// statements each), and the medians over the
// iterations are reported per variant, as µs per statement and as a share
// of the unaudited time. `wal` adds nothing here (it reads the WAL after
// the cell), so it is the "none" column. Run it with a fixed count:
//
//	go test -run XXX -bench AuditCost -benchtime 40x ./inbox
func BenchmarkAuditCost(b *testing.B) {
	variants := []struct{ name, ddl string }{
		{"none", ""},
		{"before", auditBefore},
		{"row", auditTableDDL + auditRowDDL},
		{"statement", auditTableDDL + auditStatementDDL},
	}
	ctx := context.Background()
	in := newInbox(b, nil)
	conn, err := in.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var schemas []string
	for _, v := range variants {
		s := in.Schema() + "_" + v.name
		schemas = append(schemas, s)
		if _, err := Migrate(ctx, conn, s); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { DropSchema(context.Background(), in.pool, s) })
		ddl := "INSERT INTO " + s + ".account SELECT 'acct-' || lpad(i::text, 6, '0'), 0, 0 FROM generate_series(0, 7999) i"
		if v.ddl != "" {
			ddl += ";" + fmt.Sprintf(v.ddl, pgx.Identifier{s}.Sanitize())
		}
		if _, err := conn.Exec(ctx, ddl); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		b.Fatal(err)
	}
	for _, shape := range auditCostShapes {
		b.Run(shape.name, func(b *testing.B) {
			times := make([][]float64, len(variants))
			round := 0
			for b.Loop() {
				round++
				// Each round starts with another variant: none is favoured
				// or hurt by going first.
				for j := range schemas {
					k := (j + round) % len(schemas)
					s := schemas[k]
					body := strings.NewReplacer("{S}", s, "{I}", fmt.Sprintf("(%d * 50 + i)", round)).Replace(shape.body)
					start := time.Now()
					if _, err := conn.Exec(ctx, "DO $$ DECLARE x bool; y bool; BEGIN FOR i IN 1..50 LOOP "+body+" END LOOP; END $$"); err != nil {
						b.Fatalf("%s: %v", variants[k].name, err)
					}
					times[k] = append(times[k], float64(time.Since(start).Microseconds())/50)
				}
			}
			base := median(times[0])
			for k, v := range variants {
				m := median(times[k])
				b.ReportMetric(m, "µs/stmt-"+v.name)
				if k > 0 {
					b.ReportMetric(100*(m-base)/base, "%extra-"+v.name)
				}
			}
		})
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
