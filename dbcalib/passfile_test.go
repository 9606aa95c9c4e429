package dbcalib

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPGBenchGetsNoPasswordOnItsCommandLine: pgbench's command line,
// which `ps` shows to every user of the host, holds the connection
// without its password, in every form a PostgreSQL URL or DSN gives it;
// the password is in a passfile of mode 0600 that is gone afterwards.
// The pgbench here records what it was given; TestTwinsRunAsTheStrategies
// runs the real one.
func TestPGBenchGetsNoPasswordOnItsCommandLine(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pgbench")
	script := `#!/bin/sh
printf '%s\n' "$@" > "$OUT/argv"
echo "$PGPASSFILE" > "$OUT/passfile-path"
if [ -n "$PGPASSFILE" ]; then cp "$PGPASSFILE" "$OUT/passfile"; stat -c %a "$PGPASSFILE" > "$OUT/mode"; fi
exit 1
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUT", dir)
	for _, tc := range []struct{ url, keep string }{
		{"postgres://app:Pw-Se:cret%40x@127.0.0.1:5432/db?sslmode=require&connect_timeout=5", "postgres://app@127.0.0.1:5432/db?sslmode=require&connect_timeout=5"},
		{"postgres://app@127.0.0.1:5432/db?password=Pw-Se%3Acret%40x&sslmode=disable", "postgres://app@127.0.0.1:5432/db?sslmode=disable"},
		{"host=127.0.0.1 port=5432 user=app password='Pw-Se:cret@x' dbname=db sslmode=disable", "host=127.0.0.1 port=5432 user=app dbname=db sslmode=disable"},
	} {
		_, err := RunPGBench(context.Background(), bin, shape("tx", false), Target{PGURL: tc.url, Measure: time.Second})
		if err == nil {
			t.Fatal("the recording pgbench exits 1: want an error")
		}
		argv, _ := os.ReadFile(filepath.Join(dir, "argv"))
		if strings.Contains(string(argv), "Pw-Se") || strings.Contains(err.Error(), "Pw-Se") {
			t.Errorf("%s: the password is on pgbench's command line or in the error:\n%s\n%v", tc.url, argv, err)
		}
		if !strings.HasSuffix(string(argv), "\n"+tc.keep+"\n") {
			t.Errorf("%s: pgbench connects with\n%s\nwant %s last", tc.url, argv, tc.keep)
		}
		pass, _ := os.ReadFile(filepath.Join(dir, "passfile"))
		mode, _ := os.ReadFile(filepath.Join(dir, "mode"))
		if string(pass) != `*:*:*:*:Pw-Se\:cret@x`+"\n" || strings.TrimSpace(string(mode)) != "600" {
			t.Errorf("%s: passfile %q mode %q", tc.url, pass, mode)
		}
		path, _ := os.ReadFile(filepath.Join(dir, "passfile-path"))
		if _, err := os.Stat(strings.TrimSpace(string(path))); !os.IsNotExist(err) {
			t.Errorf("the passfile %s is left behind (%v)", path, err)
		}
		for _, f := range []string{"argv", "passfile", "mode", "passfile-path"} {
			os.Remove(filepath.Join(dir, f))
		}
	}
}

// TestPasswordElsewhereInTheURL: a password that is also the user or
// database name (the local stack's URL) leaves nothing secret on the
// command line and is accepted; the same password in another parameter
// would be shown by `ps` and is refused.
func TestPasswordElsewhereInTheURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"postgres://inboxbench:inboxbench@127.0.0.1:55432/inboxbench?sslmode=disable", true},
		{"postgres://app:Pw-Secret@127.0.0.1:5432/db?application_name=Pw-Secret", false},
	} {
		left, passfile, err := withoutPassword(tc.url)
		if passfile != "" {
			os.Remove(passfile)
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want accepted=%v", tc.url, err, tc.ok)
		}
		if err == nil && strings.Contains(left, ":inboxbench@") {
			t.Errorf("%s: the password is left in %s", tc.url, left)
		}
	}
}
