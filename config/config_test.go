package config

import (
	"errors"
	"net/url"
	"slices"
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

// testURL is a URL setting with a check, like rabbitmq.url.
var testURL = Register(Setting{Key: "test.url", Flag: "test-url", Env: "INBOXBENCH_TEST_URL", Usage: "test URL",
	Default: "amqp://guest:guest@127.0.0.1:1/", Check: func(v string) error {
		if _, err := url.Parse(v); err != nil || !strings.HasPrefix(v, "amqp://") {
			return errors.New("not an amqp:// URL")
		}
		return nil
	}})

// TestValidateNeverShowsAPassword: a URL setting that is refused is shown
// in its error with the password masked, or not at all when it cannot be
// told apart: a malformed URL (an unescaped '%' in the password) or one
// without its scheme.
func TestValidateNeverShowsAPassword(t *testing.T) {
	for _, v := range []string{"amqp://u:pa%zzSECRET@host:1/v", "amqps:/u:SECRET@host/v", "u:SECRET@host:5672", "amqp://u:SE CRET@host/"} {
		c := Default().With(testURL, v)
		err := c.Validate()
		if err == nil {
			t.Fatalf("%q was accepted", v)
		}
		if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "CRET") {
			t.Errorf("the error shows the password: %v", err)
		}
		if !strings.Contains(err.Error(), testURL) {
			t.Errorf("the error does not name the setting: %v", err)
		}
	}
}

// TestSecretsAndRedactSecrets: every secret setting's value and every
// password in a URL or DSN is masked in any text, also percent-encoded,
// also from a malformed URL; the stack's documented default password is
// not a secret.
func TestSecretsAndRedactSecrets(t *testing.T) {
	c := Default().With(testSecret, "flag-Secret1").With(testURL, "amqp://u:p%25ss@word@h:1/v")
	c.PGURL = "host=db user=app password='pg sec\\'ret' dbname=x"
	got := c.Secrets()
	for _, want := range []string{"flag-Secret1", "p%ss@word", "p%25ss@word", "pg sec'ret"} {
		if !slices.Contains(got, want) {
			t.Errorf("Secrets() = %q lacks %q", got, want)
		}
	}
	if slices.Contains(Default().Secrets(), "guest") {
		t.Errorf("the default URL's password counts as a secret: %q", Default().Secrets())
	}
	text := "java -Dk=flag-Secret1 uri=amqp://x:p%25ss%40word@h pw=p%ss@word 'pg sec'ret' user u"
	out := c.RedactSecrets(text)
	for _, s := range []string{"flag-Secret1", "p%25ss%40word", "p%ss@word", "pg sec'ret"} {
		if strings.Contains(out, s) {
			t.Errorf("%q survived: %s", s, out)
		}
	}
	if !strings.Contains(out, "user u") {
		t.Errorf("masked more than the secrets: %s", out)
	}
	args := c.RedactSecretArgs([]string{"-sk", "flag-Secret1", "--uri", "amqp://u:p%25ss@word@h:1/v"})
	if strings.Contains(strings.Join(args, " "), "Secret1") || strings.Contains(strings.Join(args, " "), "word@") {
		t.Errorf("RedactSecretArgs: %q", args)
	}
}

func TestPlaintextPasswordAllowed(t *testing.T) {
	c := Default()
	for addrs, want := range map[string]bool{"127.0.0.1:1": true, "localhost": true, "[::1]:5672": true, "127.0.0.1:1,db.example:2": false, "10.0.0.1:5672": false} {
		if got := c.PlaintextPasswordAllowed(strings.Split(addrs, ",")); got != want {
			t.Errorf("%s: %v, want %v", addrs, got, want)
		}
	}
	if !c.With(SettingAllowPlaintextPasswords, "true").PlaintextPasswordAllowed([]string{"db.example:2"}) {
		t.Error("allowed explicitly, still refused")
	}
}

// TestChecksOfSettingsTogether: a registered check of several settings
// runs in Validate, after each setting's own, and not in FromEnv (a
// variant of the local stack may complete the pair first).
func TestChecksOfSettingsTogether(t *testing.T) {
	pairA := Register(Setting{Key: "test.pair-a", Flag: "test-pair-a", Env: "INBOXBENCH_TEST_PAIR_A", Usage: "a"})
	pairB := Register(Setting{Key: "test.pair-b", Flag: "test-pair-b", Env: "INBOXBENCH_TEST_PAIR_B", Usage: "b"})
	RegisterCheck(func(c Config) error {
		if (c.Get(pairA) == "") != (c.Get(pairB) == "") {
			return Invalid(pairB, nil, "comes with %s", pairA)
		}
		return nil
	})
	t.Setenv("INBOXBENCH_TEST_PAIR_A", "x")
	c, err := FromEnv()
	if err != nil {
		t.Fatalf("FromEnv ran the check of settings together: %v", err)
	}
	var se *SettingError
	if err := c.Validate(); !errors.As(err, &se) || se.Key != pairB {
		t.Fatalf("Validate: %v, want a setting error naming %s", err, pairB)
	}
	whole := c.With(pairB, "y")
	if err := whole.Validate(); err != nil {
		t.Fatalf("Validate of the whole pair: %v", err)
	}
}
