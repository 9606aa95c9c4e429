package compose

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/internal/testenv"
)

// TestPostgresSmoke proves the stack's PostgreSQL does real transactional
// work as the application role: a committed and a rolled-back transaction,
// pg_stat_statements readable, and the role not a superuser (the article's
// lab runs as an ordinary role; so must the benchmark).
func TestPostgresSmoke(t *testing.T) {
	cfg := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.PGURL)
	if err != nil {
		t.Fatalf("postgres: connect: %v", err)
	}
	defer conn.Close(ctx)

	var super bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Errorf("the application role is a superuser; the stack must provision an ordinary role")
	}

	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE smoke(id int PRIMARY KEY, v int)"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO smoke VALUES (1, 10)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE smoke SET v = v + 5"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM smoke WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 10 {
		t.Errorf("after commit then rollback v = %d, want 10", v)
	}

	var calls int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements").Scan(&calls); err != nil {
		t.Fatalf("pg_stat_statements is not usable by the app role (the contention sampler needs it): %v", err)
	}
	if calls == 0 {
		t.Errorf("pg_stat_statements recorded no calls: is it in shared_preload_libraries?")
	}
}
