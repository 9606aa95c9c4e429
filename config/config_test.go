package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Settings a driver would register; the config package's tests have no
// drivers, so they bring their own.
var (
	testSeeds  = Register(Setting{Key: "test.seeds", Flag: "test-seeds", Env: "INBOXBENCH_TEST_SEEDS", Default: "127.0.0.1:1", Kind: List, Usage: "test seeds"})
	testTLS    = Register(Setting{Key: "test.tls", Flag: "test-tls", Env: "INBOXBENCH_TEST_TLS", Kind: Bool, Usage: "test TLS"})
	testSecret = Register(Setting{Key: "test.password", Flag: "test-password", Env: "INBOXBENCH_TEST_PASSWORD", Secret: true, Usage: "test password"})
)

// TestEnvironRoundTrip: what a parent passes to a worker process in the
// environment is read back as the same configuration.
func TestEnvironRoundTrip(t *testing.T) {
	c := Default().With(testSeeds, "k1:9092,k2:9092").With(testTLS, "true").With(testSecret, "s3cret")
	c.PGURL = "postgres://u:p@db.example:5432/x?sslmode=require"
	for _, kv := range c.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	got, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if got.PGURL != c.PGURL || strings.Join(got.List(testSeeds), ",") != "k1:9092,k2:9092" || !got.Bool(testTLS) || got.Get(testSecret) != "s3cret" {
		t.Fatalf("round trip changed the configuration:\n got  %v\n want %v", got.Environ(), c.Environ())
	}
}

// TestWithDoesNotAlias: a copy changed with With leaves the original alone.
func TestWithDoesNotAlias(t *testing.T) {
	a := Default()
	b := a.With(testSeeds, "x:1")
	if a.Get(testSeeds) != "127.0.0.1:1" || b.Get(testSeeds) != "x:1" {
		t.Fatalf("a=%q b=%q", a.Get(testSeeds), b.Get(testSeeds))
	}
}

// TestFlagsAndEnv: flags override the environment, bool flags work bare,
// and a bad boolean is a SettingError naming its key.
func TestFlagsAndEnv(t *testing.T) {
	t.Setenv("INBOXBENCH_TEST_SEEDS", "env:1")
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--test-tls", "--test-seeds", "flag:1,flag:2"}); err != nil {
		t.Fatal(err)
	}
	if !c.Bool(testTLS) || strings.Join(c.List(testSeeds), ",") != "flag:1,flag:2" {
		t.Fatalf("tls %v seeds %v", c.Bool(testTLS), c.List(testSeeds))
	}
	t.Setenv("INBOXBENCH_TEST_TLS", "maybe")
	var se *SettingError
	if _, err := FromEnv(); !errors.As(err, &se) || se.Key != testTLS || !strings.Contains(err.Error(), `test.tls "maybe"`) {
		t.Fatalf("want a setting error naming the key, got %v", err)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://inboxbench:secret@127.0.0.1:55432/db?sslmode=disable", "postgres://inboxbench:***@127.0.0.1:55432/db?sslmode=disable"},
		{"postgres://u:p@ss@w0rd@host/db", "postgres://u:***@host/db"},
		{"amqps://user:pw@rabbit.example/vhost", "amqps://user:***@rabbit.example/vhost"},
		{"postgres://u@host/db?password=secret&sslmode=require", "postgres://u@host/db?password=***&sslmode=require"},
		{"host=db user=app password=secret dbname=x", "host=db user=app password=*** dbname=x"},
		{"host=db password='se cret\\' x' dbname=x", "host=db password=*** dbname=x"},
		{"postgres://host/db", "postgres://host/db"},
		{"no url here", "no url here"},
		{"amqp://u:p1@h1:1/v,amqp://u:p,2@h2:2/v", "amqp://u:***@h1:1/v,amqp://u:***@h2:2/v"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRedactArgs(t *testing.T) {
	in := []string{"bench", "run", "--pg-url", "postgres://u:pgsecret@h/db", "--test-password", "flagsecret",
		"--test-password=eqsecret", "--pg-url=host=h password=dsnsecret", "INBOXBENCH_TEST_PASSWORD=envsecret", "--test-seeds", "a:1"}
	out := strings.Join(RedactArgs(in), " ")
	for _, s := range []string{"pgsecret", "flagsecret", "eqsecret", "dsnsecret", "envsecret"} {
		if strings.Contains(out, s) {
			t.Errorf("%s survived: %s", s, out)
		}
	}
	if !strings.Contains(out, "--test-seeds a:1") || !strings.Contains(out, "--test-password ***") {
		t.Errorf("redacted too much or the wrong thing: %s", out)
	}
}

// TestWithDefaultsKeepsWhatTheUserGave: a value set by environment
// variable or flag survives WithDefaults; the others take its values.
func TestWithDefaultsKeepsWhatTheUserGave(t *testing.T) {
	t.Setenv("INBOXBENCH_TEST_PASSWORD", "from-env")
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--pg-url", "postgres://flag/x"}); err != nil {
		t.Fatal(err)
	}
	got := c.WithDefaults(map[string]string{testSecret: "variant", testSeeds: "v:1", "postgres.url": "postgres://variant/x", testTLS: "true"})
	if got.Get(testSecret) != "from-env" || got.PGURL != "postgres://flag/x" {
		t.Errorf("WithDefaults replaced what the user gave: password %q, pg %q", got.Get(testSecret), got.PGURL)
	}
	if got.Get(testSeeds) != "v:1" || !got.Bool(testTLS) {
		t.Errorf("WithDefaults left the defaults: seeds %q tls %v", got.Get(testSeeds), got.Bool(testTLS))
	}
	if !got.Given(testSecret) || got.Given(testSeeds) {
		t.Errorf("Given: password %v (set by env), seeds %v (not set)", got.Given(testSecret), got.Given(testSeeds))
	}
}
