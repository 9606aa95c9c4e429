package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
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

// TestPostgresSuperuserHasNoPassword starts a throwaway cluster of the
// native stack on a free port: the superuser has no password (a login over
// TCP fails with the old fixed one and with none) and no password file is
// left on disk, while the stack still provisions over the socket and the
// application role logs in with its documented password. A cluster an
// older stack left with a superuser password and password file is cleaned
// up on its next start.
func TestPostgresSuperuserHasNoPassword(t *testing.T) {
	if _, err := pgBin("initdb"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// The server runs as the postgres user when the test runs as root: it
	// must reach its directory.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := config.Default()
	cfg.PGURL = fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", pgAppRole, pgPassword, port, pgAppDB)
	e := &compose.Env{Dir: dir, Cfg: cfg, Out: io.Discard}
	pg := &Service{}
	t.Cleanup(func() {
		if err := pg.Stop(context.Background(), e); err != nil {
			t.Errorf("stop the throwaway cluster: %v", err)
		}
	})
	start := func() {
		t.Helper()
		if err := pg.Start(ctx, e); err != nil {
			t.Fatalf("start: %v\n%s", err, compose.TailFile(e.Path("pg", "postgres.log"), 20))
		}
		if _, err := pg.Ready(ctx, e); err != nil {
			t.Fatalf("the application role cannot log in with its documented password: %v", err)
		}
		if _, err := os.Stat(e.Path("pg", "superuser.pw")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a superuser password file is on disk: %v", err)
		}
		for _, pw := range []string{"inboxbench", ""} {
			url := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", pgSuperuser, pw, port)
			if c, err := pgx.Connect(ctx, url); err == nil {
				c.Close(ctx)
				t.Fatalf("the superuser logs in over TCP with password %q", pw)
			}
		}
	}
	start()

	// What an older stack left: a superuser password and its file.
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=postgres", e.Path("pg", "run"), port, pgSuperuser))
	if err != nil {
		t.Fatalf("the superuser cannot connect over the socket: %v", err)
	}
	_, err = conn.Exec(ctx, "ALTER ROLE "+pgSuperuser+" PASSWORD 'inboxbench'")
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.Path("pg", "superuser.pw"), []byte("inboxbench\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := pg.Stop(ctx, e); err != nil {
		t.Fatal(err)
	}
	start()
}

// TestPGPasswordVerifier: the role's password goes to PostgreSQL as its
// SCRAM-SHA-256 verifier (RFC 5803), here against one computed apart
// (Python's hashlib) for a fixed salt.
func TestPGPasswordVerifier(t *testing.T) {
	salt := make([]byte, 16)
	for i := range salt {
		salt[i] = byte(i)
	}
	got, err := scramSHA256("pencil", salt, 4096)
	want := "SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$zHCdol2044/ZyWzPLi7oxApCkamKw9Z+E4U/QApd/5Y=:dd5peBOitVnLNFu7VmwP+HiDaaw4OUCv396eVCWhYiE="
	if err != nil || got != want {
		t.Errorf("scramSHA256 = %s, %v\nwant %s", got, err, want)
	}
	v, err := pgPasswordVerifier("pencil")
	if err != nil || strings.Contains(v, "pencil") || !strings.HasPrefix(v, "SCRAM-SHA-256$4096:") {
		t.Errorf("pgPasswordVerifier = %s, %v", v, err)
	}
}
