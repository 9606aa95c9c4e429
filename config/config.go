// Package config holds the one configuration every inboxbench command uses.
//
// Values come from defaults (the local stack on loopback), then environment
// variables, then command-line flags. Defaults point at the ports that both
// `bench stack up` and compose/docker-compose.yml publish, so nothing needs to
// be set to use the local stack; remote clusters are reached by setting the
// variables below.
//
// The PostgreSQL URL and the stack directory are fields of Config. Every
// broker setting belongs to its driver: a driver registers its settings
// (endpoints, credentials, TLS) from its package with Register, under keys
// prefixed by its name ("kafka.brokers"), and reads them with Config.Get,
// List and Bool. Flags, environment variables, help texts, the environment
// handed to worker processes and the redaction of secrets all come from
// that one registry, so adding a driver touches only its own package and
// brokers/all.
package config

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/pflag"
)

// DefaultPGURL is the local stack's PostgreSQL (port 55432 is a contract of
// the stack, the compose file and the tests; see the README's stack table).
const DefaultPGURL = "postgres://inboxbench:inboxbench@127.0.0.1:55432/inboxbench?sslmode=disable"

// Kind is how a setting's text is read.
type Kind int

const (
	// String is taken as it is.
	String Kind = iota
	// List is comma separated (host:port seeds, name servers).
	List
	// Bool is true/false, yes/no, on/off or 1/0.
	Bool
)

// Setting is one value with its flag, environment variable and default.
type Setting struct {
	// Key is "<owner>.<name>"; the owner is the driver's registry name.
	Key string
	// Flag is the command-line flag without dashes ("kafka-brokers").
	Flag string
	// Env is the environment variable ("INBOXBENCH_KAFKA_BROKERS").
	Env     string
	Default string
	Usage   string
	Kind    Kind
	// Secret values (passwords, secret keys) are replaced by *** wherever
	// the configuration or a command line is recorded or printed.
	Secret bool
	// Check, when set, validates a non-empty value without a network;
	// its error should say what is accepted.
	Check func(value string) error
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Setting{}
	checks     []func(Config) error
)

// RegisterCheck adds a check of several settings together, which a
// setting's own Check cannot see: half of a key pair, a user without the
// mechanism that would send it. The package that owns the settings
// registers it, next to them; Validate runs every check after each
// setting's own, and a check's error should be a *SettingError naming
// the setting to change.
func RegisterCheck(check func(Config) error) {
	registryMu.Lock()
	defer registryMu.Unlock()
	checks = append(checks, check)
}

// Register adds a driver setting and returns its key. It panics on a
// duplicate key, flag or variable, as a programming error found at start-up.
func Register(s Setting) string {
	registryMu.Lock()
	defer registryMu.Unlock()
	if s.Key == "" || s.Flag == "" || s.Env == "" || !strings.Contains(s.Key, ".") {
		panic(fmt.Sprintf("config: setting %+v needs a key owner.name, a flag and an environment variable", s))
	}
	for _, o := range allLocked() {
		if o.Key == s.Key || o.Flag == s.Flag || o.Env == s.Env {
			panic(fmt.Sprintf("config: setting %s clashes with %s", s.Key, o.Key))
		}
	}
	registry[s.Key] = s
	return s.Key
}

// core settings are fields of Config rather than registry entries.
var core = []Setting{
	{Key: "postgres.url", Flag: "pg-url", Env: "INBOXBENCH_PG_URL", Default: DefaultPGURL,
		Usage: "PostgreSQL connection URL or key=value DSN (sslmode, sslrootcert for TLS)", Secret: false},
	{Key: "stack.dir", Flag: "stack-dir", Env: "INBOXBENCH_STACK_DIR", Default: ".stack",
		Usage: "directory of the native local stack (data, logs, Maven cache)"},
}

// Settings lists every setting: PostgreSQL and the stack directory first,
// then the registered ones by key.
func Settings() []Setting {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return allLocked()
}

func allLocked() []Setting {
	out := append([]Setting(nil), core...)
	keys := make([]string, 0, len(registry))
	for k := range registry {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, registry[k])
	}
	return out
}

// Config is the configuration shared by every command.
type Config struct {
	// PGURL is a libpq/pgx connection string (URL or key=value). TLS is set
	// with sslmode/sslrootcert as for any libpq client.
	PGURL string
	// StackDir is where `bench stack` keeps data, logs, pid files and the
	// Maven cache of the native (no-Docker) stack.
	StackDir string
	// vals holds the registered settings by key; shared by copies, so
	// changes go through With.
	vals map[string]string
	// given marks the keys the user set, by environment variable or flag
	// (WithDefaults leaves them alone); shared by copies like vals.
	given map[string]bool
}

// Default returns the local-stack configuration.
func Default() Config {
	c := Config{PGURL: DefaultPGURL, StackDir: ".stack", vals: map[string]string{}}
	for _, s := range Settings() {
		if c.field(s.Key) == nil {
			c.vals[s.Key] = s.Default
		}
	}
	return c
}

// field points at the Config field of a core setting, nil for the others.
func (c *Config) field(key string) *string {
	switch key {
	case "postgres.url":
		return &c.PGURL
	case "stack.dir":
		return &c.StackDir
	}
	return nil
}

// Get returns a setting's text ("" when unknown or unset).
func (c Config) Get(key string) string {
	if f := c.field(key); f != nil {
		return *f
	}
	if v, ok := c.vals[key]; ok {
		return v
	}
	return lookup(key).Default
}

// List returns a List setting split at commas, without empty parts.
func (c Config) List(key string) []string { return SplitList(c.Get(key)) }

// Bool returns a Bool setting; anything unreadable is false (Validate
// reports it).
func (c Config) Bool(key string) bool {
	b, _ := parseBool(c.Get(key))
	return b
}

// With returns a copy of c with key set to value; c is unchanged.
func (c Config) With(key, value string) Config {
	n := c
	if f := n.field(key); f != nil {
		*f = value
		return n
	}
	n.vals = make(map[string]string, len(c.vals)+1)
	for k, v := range c.vals {
		n.vals[k] = v
	}
	n.vals[key] = value
	return n
}

func lookup(key string) Setting {
	for _, s := range Settings() {
		if s.Key == key {
			return s
		}
	}
	return Setting{}
}

// Given reports whether the user set key, by environment variable or flag.
func (c Config) Given(key string) bool { return c.given[key] }

// WithDefaults returns a copy of c in which every key of values that the
// user did not set takes the value given here: what a local stack other
// than the plain one (compose's variants) supplies for its endpoints,
// under whatever the user set explicitly.
func (c Config) WithDefaults(values map[string]string) Config {
	n := c
	for k, v := range values {
		if !c.given[k] {
			n = n.With(k, v)
		}
	}
	return n
}

func (c *Config) markGiven(key string) {
	if c.given == nil {
		c.given = map[string]bool{}
	}
	c.given[key] = true
}

// FromEnv returns the defaults overridden by INBOXBENCH_* variables.
func FromEnv() (Config, error) {
	c := Default()
	for _, s := range Settings() {
		if v, ok := os.LookupEnv(s.Env); ok {
			if s.Kind == List && len(SplitList(v)) == 0 {
				return c, fmt.Errorf("%s is set but empty: give at least one host:port, or unset it to use the local stack", s.Env)
			}
			c = c.With(s.Key, v)
			c.markGiven(s.Key)
		}
	}
	// Each setting on its own: the checks of settings together run in
	// Validate, once a command has taken what a variant of the local
	// stack supplies (a user's half of a key pair may be completed there).
	return c, c.validateEach()
}

// BindFlags registers one flag per setting on fs, defaulting to the current
// values (call after FromEnv so the environment shows up as the default).
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	if c.vals == nil {
		c.vals = map[string]string{}
	}
	for _, s := range Settings() {
		usage := s.Usage + " (env " + s.Env + ")"
		if f := c.field(s.Key); f != nil {
			fs.Var(&fieldFlag{c: c, key: s.Key, p: f}, s.Flag, usage)
			continue
		}
		v := &flagValue{c: c, s: s}
		fl := fs.VarPF(v, s.Flag, "", usage)
		fl.DefValue = v.String()
		if s.Kind == Bool {
			fl.NoOptDefVal = "true"
		}
	}
}

// fieldFlag is a pflag.Value writing into one of Config's own fields.
type fieldFlag struct {
	c   *Config
	key string
	p   *string
}

// String is the field's value.
func (f *fieldFlag) String() string { return *f.p }

// Type tells pflag the value is a string.
func (f *fieldFlag) Type() string { return "string" }

// Set writes the field and marks the setting given.
func (f *fieldFlag) Set(x string) error {
	*f.p = x
	f.c.markGiven(f.key)
	return nil
}

// flagValue is a pflag.Value writing into a Config's registered settings.
type flagValue struct {
	c *Config
	s Setting
}

// String is the setting's value, "***" for a secret that is set (pflag
// prints defaults in --help).
func (v *flagValue) String() string {
	if v.s.Secret && v.c.Get(v.s.Key) != "" {
		return "***"
	}
	return v.c.Get(v.s.Key)
}

// Set stores the setting (a Bool must parse) and marks it given.
func (v *flagValue) Set(x string) error {
	if v.s.Kind == Bool {
		if _, err := parseBool(x); err != nil {
			return err
		}
	}
	v.c.vals[v.s.Key] = x
	v.c.markGiven(v.s.Key)
	return nil
}

// Type is the setting's kind as pflag names it.
func (v *flagValue) Type() string {
	switch v.s.Kind {
	case List:
		return "strings"
	case Bool:
		return "bool"
	}
	return "string"
}

// Validate checks values that can be checked without a network (a file a
// setting names is read): each setting's own Check, then the checks of
// settings together (RegisterCheck). The error is a *SettingError naming
// the setting's key.
func (c *Config) Validate() error {
	if err := c.validateEach(); err != nil {
		return err
	}
	registryMu.RLock()
	cs := append([]func(Config) error(nil), checks...)
	registryMu.RUnlock()
	for _, check := range cs {
		if err := check(*c); err != nil {
			return err
		}
	}
	return nil
}

// validateEach runs each setting's own Check.
func (c *Config) validateEach() error {
	for _, s := range Settings() {
		v := c.Get(s.Key)
		var err error
		switch {
		case s.Kind == Bool:
			_, err = parseBool(v)
		case s.Check != nil && v != "":
			err = s.Check(v)
		}
		if err != nil {
			return &SettingError{Key: s.Key, Value: Shown(v, s.Secret), Err: fmt.Errorf("%v (%s)", err, s.Usage)}
		}
	}
	return nil
}

// EnvHelp lists the environment variables, for --help texts.
func EnvHelp() string {
	var b strings.Builder
	for _, s := range Settings() {
		fmt.Fprintf(&b, "  %-32s %s\n", s.Env, s.Usage)
	}
	return b.String()
}

// SplitList splits a comma-separated list, trimming each item and
// dropping empty ones: how a List setting is read (Config.List), and how
// a flag or option holding a list is read the same way.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off", "":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: use true or false")
}

// Environ returns the configuration as INBOXBENCH_* assignments, for a
// child process (a `bench worker` started by a run) to see exactly the
// settings its parent resolved from flags and environment.
func (c *Config) Environ() []string {
	var out []string
	for _, s := range Settings() {
		out = append(out, s.Env+"="+c.Get(s.Key))
	}
	return out
}
