// Package service puts a team's own consumer service under test: the
// suite starts its instances from a spec (a small YAML file), hands each
// the cell's broker, topic, group, consumer name and PostgreSQL schema
// through its environment, injects faults from outside (kill -9,
// SIGSTOP/SIGCONT, restarts, its database connections terminated, its
// broker connections cut through a proxy the suite runs between them) and
// observes only the service's tables: the final state through the spec's
// SQL, and every change as it commits through logical decoding of the
// effects table (wal.go). Nothing the service says of itself is trusted.
//
// What it observes becomes the same inbox.Snapshot the built-in consumer's
// cells are judged from (snapshot.go), so the checker, the result files,
// the report and compare are the ones every cell has. docs/services.md is
// the user's guide; examples/services holds services written as teams
// write them.
package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inboxbench/inboxbench/workload"
)

// Spec describes a consumer service: how to start one instance, how many,
// how to tell one is ready, and where its effects and its inbox are.
type Spec struct {
	// Name labels the service's cells (their strategy column reads
	// "service:NAME").
	Name string `yaml:"name"`
	// Command starts one instance: the program and its arguments, run in
	// Dir. A relative program path ("./run.sh", "target/app") is resolved
	// against Dir; a bare name ("java") is looked up on the PATH.
	Command []string `yaml:"command"`
	// Dir is the instances' working directory, relative to the spec file
	// (default: the spec file's directory).
	Dir string `yaml:"dir"`
	// Instances is how many instances consume one cell (default 2).
	Instances int `yaml:"instances"`
	// Env is added to the environment the suite hands each instance
	// (which wins on a clash: the cell's names are not the service's to
	// choose).
	Env map[string]string `yaml:"env"`
	// Brokers lists the drivers the service can consume from (default:
	// every broker the run names); a cell on another broker is N/A.
	Brokers []string `yaml:"brokers"`
	Ready   Ready    `yaml:"ready"`
	// StopGrace is how long an instance may take to exit after SIGTERM
	// before it is killed (default 10s).
	StopGrace workload.Duration `yaml:"stop_grace"`
	// Handover is how long the broker may take to give a dead instance's
	// work to another: the service's session timeout (Kafka clients
	// default to 45s). A cell waits this long, and some, for progress
	// before it calls what is missing lost (default 45s).
	Handover workload.Duration `yaml:"handover"`
	// Schema is a SQL file (relative to the spec file) the suite runs in
	// the cell's schema (search_path set to it) before any instance
	// starts: the service's tables, as its own migrations would create
	// them. Empty: the service creates its tables itself, before it
	// reports ready.
	Schema  string  `yaml:"schema"`
	Effects Effects `yaml:"effects"`
	// Inbox reads the service's dedup records; nil when it keeps none.
	Inbox *Inbox `yaml:"inbox"`
	// Features lists what the service handles beyond increments, in the
	// inbox package's feature names (snapshots, idempotency-keys);
	// scenarios that need another feature are N/A.
	Features []string `yaml:"features"`
	// Mistake declares a variant that makes one of the article's
	// mistakes on purpose (split, ack-before-commit, …): a negative
	// control, expected to FAIL where the suite's own control of that
	// name (broken-MISTAKE) is, and counted in conform's mutation score.
	Mistake string `yaml:"mistake"`

	path string // the spec file's absolute path
}

// Mistakes are the article's mistakes a service variant may declare: each
// has a negative-control strategy of the suite named broken-MISTAKE.
var Mistakes = []string{"split", "ack-before-commit", "check-then-insert", "global-key", "aggregate-key", "no-version", "ttl-dedup"}

// Control is the negative control the spec stands for ("" for a service
// that declares no mistake).
func (s *Spec) Control() string {
	if s.Mistake == "" {
		return ""
	}
	return "broken-" + s.Mistake
}

// Ready says how the suite tells an instance is ready to consume.
// Exactly one of Log, TCP and HTTP is set.
type Ready struct {
	// Log is a regular expression matched against each line the
	// instance writes to stdout or stderr.
	Log string `yaml:"log"`
	// TCP is an address that accepts connections once the instance is
	// ready; HTTP a URL that answers 2xx. Both may use ${INSTANCE} (the
	// instance's number, from 0) to tell instances apart.
	TCP  string `yaml:"tcp"`
	HTTP string `yaml:"http"`
	// Timeout bounds the wait (default 60s).
	Timeout workload.Duration `yaml:"timeout"`

	re *regexp.Regexp
}

// Effects names the service's business table: one row per aggregate with
// its state and version. The suite decodes this table's changes from the
// WAL, so the columns are named, and reads the final state with Query.
type Effects struct {
	// Table is the table's name in the cell's schema.
	Table string `yaml:"table"`
	// Aggregate, State and Version are its columns: the aggregate id
	// (the envelope's subject), the balance, the aggregate version.
	Aggregate string `yaml:"aggregate"`
	State     string `yaml:"state"`
	Version   string `yaml:"version"`
	// Query reads the final state (aggregate, state, version), with
	// search_path set to the cell's schema. Default: those columns of
	// Table.
	Query string `yaml:"query"`
}

// Inbox reads the service's dedup records.
type Inbox struct {
	// Query returns one row per record, with search_path set to the
	// cell's schema: (consumer, event_id) or (consumer, source,
	// event_id). Rows of other consumers are ignored.
	Query string `yaml:"query"`
}

// Defaults a spec starts from.
const (
	defaultInstances = 2
	defaultStopGrace = 10 * time.Second
	defaultHandover  = 45 * time.Second
	defaultReady     = 60 * time.Second
	// MaxInstances bounds the instances of one cell: each holds database
	// and broker connections.
	MaxInstances = 32
)

// Load reads and validates a spec file.
func Load(path string) (*Spec, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("service spec %s: %w", path, err)
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("service spec %s: %w", path, err)
	}
	s, err := Parse(b, abs)
	if err != nil {
		return nil, fmt.Errorf("service spec %s: %w", path, err)
	}
	return s, nil
}

// Parse decodes a spec, rejecting unknown fields, and validates it; path
// is the file it came from (relative paths in it are resolved against
// its directory).
func Parse(b []byte, path string) (*Spec, error) {
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty: a spec needs at least name, command and effects")
		}
		return nil, fmt.Errorf("%s (fields: %s)", strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "), fieldList)
	}
	s.path = path
	s.defaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

const fieldList = "name, command, dir, instances, env, brokers, ready{log,tcp,http,timeout}, stop_grace, handover, schema, effects{table,aggregate,state,version,query}, inbox{query}, features, mistake"

func (s *Spec) defaults() {
	if s.Instances == 0 {
		s.Instances = defaultInstances
	}
	if s.StopGrace == 0 {
		s.StopGrace = workload.Duration(defaultStopGrace)
	}
	if s.Handover == 0 {
		s.Handover = workload.Duration(defaultHandover)
	}
	if s.Ready.Timeout == 0 {
		s.Ready.Timeout = workload.Duration(defaultReady)
	}
	e := &s.Effects
	if e.Query == "" && e.Table != "" {
		e.Query = fmt.Sprintf("SELECT %s, %s, %s FROM %s", quoteIdent(e.Aggregate), quoteIdent(e.State), quoteIdent(e.Version), quoteIdent(e.Table))
	}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$`)

// Validate names the first field that is wrong and what it accepts.
func (s *Spec) Validate() error {
	switch {
	case !nameRE.MatchString(s.Name):
		return fmt.Errorf("name %q: 1 to 40 letters, digits, '_', '.' or '-', starting with a letter or digit", s.Name)
	case len(s.Command) == 0 || s.Command[0] == "":
		return errors.New("command: the program that starts one instance, and its arguments, e.g. [java, -jar, target/app.jar]")
	case s.Instances < 1 || s.Instances > MaxInstances:
		return fmt.Errorf("instances %d: from 1 to %d", s.Instances, MaxInstances)
	case s.StopGrace < 0:
		return fmt.Errorf("stop_grace %s: must not be negative", s.StopGrace.D())
	case s.Handover < 0 || s.Handover.D() > 10*time.Minute:
		return fmt.Errorf("handover %s: from 0 to 10m", s.Handover.D())
	}
	if err := s.Ready.validate(); err != nil {
		return err
	}
	if err := s.Effects.validate(); err != nil {
		return err
	}
	if s.Mistake != "" && !slices.Contains(Mistakes, s.Mistake) {
		return fmt.Errorf("mistake %q: one of %s (or leave it out)", s.Mistake, strings.Join(Mistakes, ", "))
	}
	if s.Inbox != nil && strings.TrimSpace(s.Inbox.Query) == "" {
		return errors.New("inbox.query: the SQL that returns (consumer, event_id) or (consumer, source, event_id); leave inbox out when the service keeps no dedup records")
	}
	for k := range s.Env {
		if strings.HasPrefix(k, "INBOXBENCH_") {
			return fmt.Errorf("env %s: names starting with INBOXBENCH_ are the suite's (docs/services.md lists them)", k)
		}
	}
	if _, err := os.Stat(s.WorkDir()); err != nil {
		return fmt.Errorf("dir %s: %w", s.WorkDir(), err)
	}
	if s.Schema != "" {
		if _, err := os.Stat(s.SchemaPath()); err != nil {
			return fmt.Errorf("schema %s: %w", s.SchemaPath(), err)
		}
	}
	return nil
}

func (r *Ready) validate() error {
	n := 0
	for _, v := range []string{r.Log, r.TCP, r.HTTP} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("ready: exactly one of log (a regular expression on the instance's output), tcp (an address) or http (a URL)")
	}
	if r.Log != "" {
		re, err := regexp.Compile(r.Log)
		if err != nil {
			return fmt.Errorf("ready.log %q: %w", r.Log, err)
		}
		r.re = re
	}
	if r.Timeout < 0 {
		return fmt.Errorf("ready.timeout %s: must not be negative", r.Timeout.D())
	}
	return nil
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func (e *Effects) validate() error {
	for _, f := range []struct{ name, v string }{{"effects.table", e.Table}, {"effects.aggregate", e.Aggregate}, {"effects.state", e.State}, {"effects.version", e.Version}} {
		if !identRE.MatchString(f.v) {
			return fmt.Errorf("%s %q: a table or column name (letters, digits, '_'), as the WAL names it", f.name, f.v)
		}
	}
	return nil
}

// Path is the spec file's absolute path.
func (s *Spec) Path() string { return s.path }

// WorkDir is the instances' working directory.
func (s *Spec) WorkDir() string { return s.rel(s.Dir) }

// SchemaPath is the schema file's absolute path ("" without one).
func (s *Spec) SchemaPath() string {
	if s.Schema == "" {
		return ""
	}
	return s.rel(s.Schema)
}

func (s *Spec) rel(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(s.path), p)
}

// Label is the service's strategy column in result files.
func (s *Spec) Label() string { return "service:" + s.Name }

// Speaks reports whether the service consumes from broker, and why not.
func (s *Spec) Speaks(broker string) (bool, string) {
	if len(s.Brokers) == 0 {
		return true, ""
	}
	for _, b := range s.Brokers {
		if b == broker {
			return true, ""
		}
	}
	return false, fmt.Sprintf("the service consumes from %s only (its spec's brokers)", strings.Join(s.Brokers, ", "))
}

// Handles reports whether the spec declares feature.
func (s *Spec) Handles(feature string) bool {
	for _, f := range s.Features {
		if f == feature {
			return true
		}
	}
	return false
}

// quoteIdent quotes a validated identifier for SQL.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
