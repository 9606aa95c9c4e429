package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/inbox/strategyfile"
)

// FileStrategy is a user-defined strategy read from a SQL file: a team's
// own inbox SQL, run through the same workloads, brokers, oracle and
// checker as the built-in strategies. See examples/strategies/README.md
// for the format and the contract with the checker.
//
// It works in the schema of the Inbox it is given, after the built-in
// migration: the file's @ddl may add to that schema, and its statements
// must maintain {{account}} (the consumer's business table) and
// {{schema}}.inbox, which is what the checker judges. A version-ahead
// event it answers GAP is parked by the harness (userpark.go); a file with
// a @batch section applies batches (userbatch.go); the apply paths are in
// userapply.go. It never falls back to a built-in strategy: every event,
// snapshots and idempotency keys included, goes through the file's SQL.
// The file was checked when it was read (package strategyfile): running
// it renders and binds its statements, it never checks them again.
type FileStrategy struct {
	f *strategyfile.File
	// label, when set, names the strategy instead of file:NAME@HASH
	// (Labelled).
	label string

	mu       sync.Mutex
	rendered map[tableKey]*fileSQL // by schema and account table
	prepared map[tableKey]bool     // statements the server accepted
	ddlRan   map[string]bool       // schemas whose @ddl ran
}

// tableKey names a consumer's tables: the schema and its account table.
type tableKey struct{ schema, account string }

// fileSQL is the file's statements for one schema and account table, by
// section.
type fileSQL [strategyfile.NumSections][]*renderedStmt

// Preparer is implemented by strategies that must set up their schema and
// have the server check their SQL before any event is published (user
// strategy files). A runner calls Prepare after Migrate, once per schema.
type Preparer interface {
	Prepare(ctx context.Context, pool *pgxpool.Pool, schema string) error
}

// LoadStrategyFile reads and checks a strategy file (format, sections,
// parameter names) without a database. Prepare then checks its SQL against
// the server.
func LoadStrategyFile(path string) (*FileStrategy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &strategyfile.Error{Path: path, Msg: "cannot read it", Err: err}
	}
	return ParseStrategyFile(path, b)
}

// ParseStrategyFile is LoadStrategyFile on content already read; path
// names the strategy and appears in errors.
func ParseStrategyFile(path string, content []byte) (*FileStrategy, error) {
	f, err := strategyfile.Parse(path, content)
	if err != nil {
		return nil, err
	}
	return &FileStrategy{f: f, rendered: map[tableKey]*fileSQL{}, prepared: map[tableKey]bool{}, ddlRan: map[string]bool{}}, nil
}

// Name is "file:" + the file's base name + "@" + the first 8 hex digits of
// the SHA-256 of its content, so a result always says which SQL produced
// it.
func (s *FileStrategy) Name() string {
	if s.label != "" {
		return s.label
	}
	return "file:" + s.f.Base + "@" + s.f.Hash
}

// Label is the name a Labelled strategy was given, or "".
func (s *FileStrategy) Label() string { return s.label }

// labelPattern is what a label may be: short, lower case, and unlike any
// file:NAME@HASH.
var labelPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Labelled is the same file under another name, label: two labels of one
// run may name two files (an A/B comparison of old and new SQL in one
// run) or the same file twice (an A/A check that the measurement tells
// no difference). The label must not be a built-in strategy's name.
func (s *FileStrategy) Labelled(label string) (*FileStrategy, error) {
	if !labelPattern.MatchString(label) {
		return nil, &strategyfile.Error{Path: s.f.Path, Msg: fmt.Sprintf("label %q: use 1 to 32 lower-case letters, digits, '-' or '_', starting with a letter (e.g. base, new)", label)}
	}
	if _, err := Lookup(label); err == nil || strings.HasPrefix(label, "broken-") {
		return nil, &strategyfile.Error{Path: s.f.Path, Msg: fmt.Sprintf("label %q is a built-in strategy's name: choose another", label)}
	}
	return &FileStrategy{f: s.f, label: label, rendered: map[tableKey]*fileSQL{}, prepared: map[tableKey]bool{}, ddlRan: map[string]bool{}}, nil
}

// Description is the header's description, with the file's path.
func (s *FileStrategy) Description() string {
	h := s.f.Header
	d := h.Description
	if d == "" {
		d = "user strategy (outcome: " + h.Outcome + ")"
	}
	if h.Name != "" {
		d = h.Name + ": " + d
	}
	return d + " [" + s.f.Path + "]"
}

// Broken reports the header's broken: true.
func (s *FileStrategy) Broken() bool { return s.f.Header.Broken }

// Path is the file the strategy was read from.
func (s *FileStrategy) Path() string { return s.f.Path }

// Hash is the short content hash in Name.
func (s *FileStrategy) Hash() string { return s.f.Hash }

// Outcome is strategyfile.OutcomeResult, OutcomeRows or OutcomeBatch.
func (s *FileStrategy) Outcome() string { return s.f.Header.Outcome }

// ExternalStep implements Externals: a file with the header "external:
// before-commit" calls the external service in the event's transaction.
func (s *FileStrategy) ExternalStep() string {
	if s.f.Header.External == "" {
		return ""
	}
	return "in the transaction, before the commit, key = its @external statement's request_key"
}

// PrefersBatches implements Batching: a file with a @batch section is
// handed batches, as the built-in batch strategy is.
func (s *FileStrategy) PrefersBatches() bool { return s.f.Header.Outcome == strategyfile.OutcomeBatch }

// HasPrune reports whether the file has a @prune section.
func (s *FileStrategy) HasPrune() bool { return len(s.f.Statements(strategyfile.Prune)) > 0 }

// String is the name, for logs.
func (s *FileStrategy) String() string { return s.Name() + " (" + strconv.Quote(s.f.Path) + ")" }

// sqlFor renders the file for a schema and account table (cached); the
// names were checked where they came in (Prepare, Validate, New).
func (s *FileStrategy) sqlFor(k tableKey) *fileSQL {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rendered[k]; r != nil {
		return r
	}
	t := strategyfile.Target{Schema: pgx.Identifier{k.schema}.Sanitize(), Account: pgx.Identifier{k.schema, k.account}.Sanitize()}
	r := &fileSQL{}
	for sec := range strategyfile.NumSections {
		for _, st := range s.f.Statements(sec) {
			r[sec] = append(r[sec], render(st, t))
		}
	}
	s.rendered[k] = r
	return r
}

// serverErr wraps an error from the server about statement r, pointing at
// the file position the server names.
func (s *FileStrategy) serverErr(r *renderedStmt, what string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		// Not the SQL's fault (connection, timeout): not strategyfile.ErrInvalid.
		return fmt.Errorf("strategy file %s: @%s statement %d: %s: %w", s.f.Path, r.Section, r.Index, what, err)
	}
	line, col := s.f.Position(r.Rendered, pe.Position)
	return &strategyfile.Error{Path: s.f.Path, Line: line, Col: col, Section: r.Section.String(), Index: r.Index, Msg: what, Err: err}
}

// Prepare runs the file's @ddl in schema (in one transaction, after the
// built-in migration) and has the server parse and describe every
// statement, so a syntax error, an unknown table or column, or a missing
// result column is reported, naming the file, statement and position,
// before any event is published. It runs the DDL once per schema, with
// {{account}} the default account table.
func (s *FileStrategy) Prepare(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	return s.prepare(ctx, pool, tableKey{schema, DefaultOptions().AccountTable})
}

func (s *FileStrategy) prepare(ctx context.Context, pool *pgxpool.Pool, k tableKey) error {
	r := s.sqlFor(k)
	if err := s.runDDL(ctx, pool, k.schema); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prepared[k] {
		return nil
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("strategy file %s: acquire connection: %w", s.f.Path, err)
	}
	defer c.Release()
	for _, group := range r[strategyfile.Apply:] {
		for i, st := range group {
			// The unnamed statement: parsed, analysed and described, not
			// kept (pgx's statement cache prepares it per connection later).
			sd, err := c.Conn().Prepare(ctx, "", st.SQL)
			if err != nil {
				return s.serverErr(st, "", err)
			}
			st.asText = make([]bool, len(sd.ParamOIDs))
			for k, oid := range sd.ParamOIDs {
				st.asText[k] = textOIDs[oid]
			}
			if i == len(group)-1 {
				if err := s.checkLast(st, sd); err != nil {
					return err
				}
			}
		}
	}
	s.prepared[k] = true
	return nil
}

// runDDL runs the file's @ddl once per schema, in one transaction.
func (s *FileStrategy) runDDL(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ddl := s.sqlFor(tableKey{schema, DefaultOptions().AccountTable})[strategyfile.DDL]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ddlRan[schema] || len(ddl) == 0 {
		s.ddlRan[schema] = true
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("strategy file %s: @ddl: begin: %w", s.f.Path, err)
	}
	// Several processes (bench worker) prepare the same schema: the first
	// runs the DDL, the others find its mark and skip it.
	done, err := s.markDDL(ctx, tx, schema)
	if err != nil {
		return rollback(ctx, tx, fmt.Errorf("strategy file %s: @ddl: %w", s.f.Path, err))
	}
	if done {
		s.ddlRan[schema] = true
		return tx.Commit(ctx)
	}
	for _, st := range ddl {
		if _, err := tx.Exec(ctx, st.SQL); err != nil {
			return rollback(ctx, tx, s.serverErr(st, "", err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("strategy file %s: @ddl: commit: %w", s.f.Path, err)
	}
	s.ddlRan[schema] = true
	return nil
}

// markDDL records in schema that this file's @ddl runs, under a lock
// held to the end of tx, and reports whether another process ran it
// already.
func (s *FileStrategy) markDDL(ctx context.Context, tx pgx.Tx, schema string) (bool, error) {
	q := pgx.Identifier{schema, "strategy_file_ddl"}.Sanitize()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", schema+".strategy_file_ddl"); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+q+" (file text PRIMARY KEY, ran_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, "INSERT INTO "+q+" (file) VALUES ($1) ON CONFLICT DO NOTHING", s.Name())
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 0, nil
}

// checkLast checks what the last statement of a section must return: the
// result column of @apply, ordinal and result of @batch.
func (s *FileStrategy) checkLast(st *renderedStmt, sd *pgconn.StatementDescription) error {
	switch st.Section {
	case strategyfile.Apply:
		return s.checkColumns(st, sd, "result")
	case strategyfile.Batch:
		return s.checkColumns(st, sd, "ordinal", "result")
	case strategyfile.External:
		return s.checkColumns(st, sd, "request_key", "amount")
	}
	return nil
}

// textOIDs are the column types a result name can be scanned from.
var textOIDs = map[uint32]bool{25: true, 1043: true, 1042: true, 19: true, 705: true}

// intOIDs are the column types an ordinal can be scanned from.
var intOIDs = map[uint32]bool{20: true, 21: true, 23: true}

// checkColumns checks that a statement returns the named columns, result
// as text and ordinal as an integer.
func (s *FileStrategy) checkColumns(st *renderedStmt, sd *pgconn.StatementDescription, want ...string) error {
	ferr := func(msg string, a ...any) error { return s.f.StmtError(st.Stmt, msg, a...) }
	var names []string
	types := map[string]uint32{}
	for _, fd := range sd.Fields {
		names = append(names, fd.Name)
		types[fd.Name] = fd.DataTypeOID
	}
	got := "no columns"
	if len(names) > 0 {
		got = "columns " + strings.Join(names, ", ")
	}
	for _, w := range want {
		oid, ok := types[w]
		switch {
		case !ok && st.Section == strategyfile.External:
			return ferr("missing %s column (it returns %s): the @external statement returns at most one row, with columns request_key (text: the idempotency key the call carries, '' for none) and amount (bigint: the payment); no row, no call", w, got)
		case w == "request_key" && !textOIDs[oid]:
			return ferr("the request_key column has type OID %d: it must be text", oid)
		case w == "amount" && !intOIDs[oid]:
			return ferr("the amount column has type OID %d: it must be an integer (bigint)", oid)
		case !ok && st.Section == strategyfile.Batch:
			return ferr("missing %s column (it returns %s): the last @batch statement must return one row per event with columns ordinal (its position, 1..n) and result (APPLIED, DUPLICATE, GAP, STALE, CONFLICT or PARKED)", w, got)
		case !ok:
			return ferr("missing result column (it returns %s): with outcome: result the last @apply statement must return a text column named result (APPLIED, DUPLICATE, GAP, STALE, CONFLICT or PARKED); or use outcome: rows", got)
		case w == "result" && !textOIDs[oid]:
			return ferr("the result column has type OID %d: it must be text naming APPLIED, DUPLICATE, GAP, STALE, CONFLICT or PARKED", oid)
		case w == "ordinal" && !intOIDs[oid]:
			return ferr("the ordinal column has type OID %d: it must be an integer, the event's position 1..n", oid)
		}
	}
	return nil
}

// Validate checks the file against the server in a scratch schema that is
// migrated, prepared and dropped again: a runner calls it before any
// event is published, so a bad file is a usage error and never a
// half-run.
func (s *FileStrategy) Validate(ctx context.Context, pool *pgxpool.Pool, scratchSchema string) (err error) {
	if _, err := Migrate(ctx, pool, scratchSchema); err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := DropSchema(dctx, pool, scratchSchema); derr != nil {
			err = errors.Join(err, derr)
		}
		s.mu.Lock()
		for k := range s.rendered {
			if k.schema == scratchSchema {
				delete(s.rendered, k)
				delete(s.prepared, k)
			}
		}
		delete(s.ddlRan, scratchSchema)
		s.mu.Unlock()
	}()
	return s.Prepare(ctx, pool, scratchSchema)
}
