package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
// a @batch section applies batches (userbatch.go). It never falls back to
// a built-in strategy: every event, snapshots and idempotency keys
// included, goes through the file's SQL.
type FileStrategy struct {
	f *parsedFile

	mu       sync.Mutex
	rendered map[tableKey]*fileSQL // by schema and account table
	prepared map[tableKey]bool     // statements the server accepted
	ddlRan   map[string]bool       // schemas whose @ddl ran
}

// tableKey names a consumer's tables: the schema and its account table.
type tableKey struct{ schema, account string }

// fileSQL is the file's statements for one schema and account table.
type fileSQL struct {
	ddl, apply, claim, effect, batch, prune []*renderedStmt
}

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
		return nil, &FileError{Path: path, Msg: "cannot read it", Err: err}
	}
	return ParseStrategyFile(path, b)
}

// ParseStrategyFile is LoadStrategyFile on content already read; path
// names the strategy and appears in errors.
func ParseStrategyFile(path string, content []byte) (*FileStrategy, error) {
	f, err := parseStrategyFile(path, content)
	if err != nil {
		return nil, err
	}
	return &FileStrategy{f: f, rendered: map[tableKey]*fileSQL{}, prepared: map[tableKey]bool{}, ddlRan: map[string]bool{}}, nil
}

// Name is "file:" + the file's base name + "@" + the first 8 hex digits of
// the SHA-256 of its content, so a result always says which SQL produced
// it.
func (s *FileStrategy) Name() string { return "file:" + s.f.base + "@" + s.f.hash }

// Description is the header's description, with the file's path.
func (s *FileStrategy) Description() string {
	d := s.f.header["description"]
	if d == "" {
		d = "user strategy (outcome: " + s.f.header["outcome"] + ")"
	}
	if n := s.f.header["name"]; n != "" {
		d = n + ": " + d
	}
	return d + " [" + s.f.path + "]"
}

// Broken reports the header's broken: true.
func (s *FileStrategy) Broken() bool { return s.f.header["broken"] == "true" }

// Path is the file the strategy was read from.
func (s *FileStrategy) Path() string { return s.f.path }

// Hash is the short content hash in Name.
func (s *FileStrategy) Hash() string { return s.f.hash }

// Outcome is OutcomeResult, OutcomeRows or OutcomeBatch.
func (s *FileStrategy) Outcome() string { return s.f.header["outcome"] }

// sqlFor renders the file for a schema and account table (cached).
func (s *FileStrategy) sqlFor(k tableKey) (*fileSQL, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rendered[k]; r != nil {
		return r, nil
	}
	if err := ValidateSchema(k.schema); err != nil {
		return nil, err
	}
	t := target{schema: pgx.Identifier{k.schema}.Sanitize(), account: pgx.Identifier{k.schema, k.account}.Sanitize()}
	r := &fileSQL{}
	for name, dst := range map[string]*[]*renderedStmt{"ddl": &r.ddl, "apply": &r.apply, "claim": &r.claim, "effect": &r.effect,
		"batch": &r.batch, "prune": &r.prune} {
		for _, st := range s.f.sections[name] {
			rs, err := s.f.render(st, t)
			if err != nil {
				return nil, err
			}
			*dst = append(*dst, rs)
		}
	}
	s.rendered[k] = r
	return r, nil
}

// serverErr wraps an error from the server about statement r, pointing at
// the file position the server names.
func (s *FileStrategy) serverErr(r *renderedStmt, what string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		// Not the SQL's fault (connection, timeout): not ErrStrategyFile.
		return fmt.Errorf("strategy file %s: @%s statement %d: %s: %w", s.f.path, r.section, r.index, what, err)
	}
	line, col := s.f.errorAt(r, pe.Position)
	return &FileError{Path: s.f.path, Line: line, Col: col, Section: r.section, Index: r.index, Msg: what, Err: err}
}

// Prepare runs the file's @ddl in schema (in one transaction, after the
// built-in migration) and has the server parse and describe every
// statement, so a syntax error, an unknown table or column, or a missing
// result column is reported, naming the file, statement and position,
// before any event is published. It runs the DDL once per schema, with
// {{account}} the default account table.
func (s *FileStrategy) Prepare(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return s.prepare(ctx, pool, tableKey{schema, DefaultOptions().AccountTable})
}

func (s *FileStrategy) prepare(ctx context.Context, pool *pgxpool.Pool, k tableKey) error {
	r, err := s.sqlFor(k)
	if err != nil {
		return err
	}
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
		return fmt.Errorf("strategy file %s: acquire connection: %w", s.f.path, err)
	}
	defer c.Release()
	for _, group := range [][]*renderedStmt{r.apply, r.claim, r.effect, r.batch, r.prune} {
		for i, st := range group {
			// The unnamed statement: parsed, analysed and described, not
			// kept (pgx's statement cache prepares it per connection later).
			sd, err := c.Conn().Prepare(ctx, "", st.sql)
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
	r, err := s.sqlFor(tableKey{schema, DefaultOptions().AccountTable})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ddlRan[schema] || len(r.ddl) == 0 {
		s.ddlRan[schema] = true
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("strategy file %s: @ddl: begin: %w", s.f.path, err)
	}
	// Several processes (bench worker) prepare the same schema: the first
	// runs the DDL, the others find its mark and skip it.
	done, err := s.markDDL(ctx, tx, schema)
	if err != nil {
		return rollback(ctx, tx, fmt.Errorf("strategy file %s: @ddl: %w", s.f.path, err))
	}
	if done {
		s.ddlRan[schema] = true
		return tx.Commit(ctx)
	}
	for _, st := range r.ddl {
		if _, err := tx.Exec(ctx, st.sql); err != nil {
			return rollback(ctx, tx, s.serverErr(st, "", err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("strategy file %s: @ddl: commit: %w", s.f.path, err)
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
	switch st.section {
	case "apply":
		return s.checkColumns(st, sd, "result")
	case "batch":
		return s.checkColumns(st, sd, "ordinal", "result")
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
	line, col := s.f.lineCol(st.off)
	ferr := func(msg string, a ...any) error {
		return &FileError{Path: s.f.path, Line: line, Col: col, Section: st.section, Index: st.index, Msg: fmt.Sprintf(msg, a...)}
	}
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
		case !ok && st.section == "batch":
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

// args binds a statement's parameters for one event, in $n order.
func eventArgs(st *renderedStmt, consumer string, ev *envelope.Event) []any {
	args := make([]any, len(st.names))
	for i, n := range st.names {
		switch n {
		case "consumer":
			args[i] = consumer
		case "source":
			args[i] = ev.Source
		case "event_id":
			args[i] = ev.ID
		case "event_type":
			args[i] = ev.Type
		case "event_time":
			if !ev.Time.IsZero() {
				args[i] = ev.Time
			}
		case "aggregate_id":
			args[i] = ev.Subject
		case "version":
			args[i] = ev.AggregateVersion
		case "amount":
			args[i] = ev.Amount
		case "kind":
			args[i] = ev.Kind
		case "idempotency_key":
			args[i] = ev.IdempotencyKey
		case "tenant":
			args[i] = ev.Tenant
		case "operation":
			args[i] = ev.Operation
		case "request_hash":
			args[i] = RequestHash(ev)
		}
	}
	return textArgs(st, args)
}

// textArgs sends numbers and times as text where the server typed the
// parameter as text.
func textArgs(st *renderedStmt, args []any) []any {
	for i, a := range args {
		if i >= len(st.asText) || !st.asText[i] {
			continue
		}
		switch v := a.(type) {
		case int64:
			args[i] = strconv.FormatInt(v, 10)
		case time.Time:
			args[i] = v.Format(time.RFC3339Nano)
		}
	}
	return args
}

// ApplyBatch applies the events with the file's SQL: each in its own
// transaction as the file's outcome mode says, or (outcome: batch) the
// whole batch in one. With parking on, a version-ahead event the file
// answers GAP is parked by the harness and applied again with the file's
// SQL once its predecessor applied (userpark.go).
func (s *FileStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	r, err := s.ready(ctx, in)
	var outs []Outcome
	var swept map[string]bool
	if err == nil && s.f.header["outcome"] == OutcomeBatch {
		outs, swept = s.applyBatchSQL(ctx, in, r, consumer, events, in.opt.Parking())
	} else {
		outs, _ = perEvent(events, func(ev *envelope.Event) Outcome { return s.applyEvent(ctx, in, r, err, consumer, ev) })
	}
	if in.opt.Parking() {
		s.parkAndDrain(ctx, in, r, consumer, events, outs, swept)
	}
	return outs, joinOutcomeErrors(outs)
}

// applyEvent applies one event with the per-event sections (or a batch
// of one), in its own transaction; prepErr is the error of preparing them.
func (s *FileStrategy) applyEvent(ctx context.Context, in *Inbox, r *fileSQL, prepErr error, consumer string, ev *envelope.Event) Outcome {
	if verr := validate(consumer, ev); verr != nil {
		o := Outcome{Err: verr}
		if ev != nil {
			o = newOutcome(ev)
			o.Err = verr
		}
		return o
	}
	if prepErr != nil {
		o := newOutcome(ev)
		o.Err = eventErr(consumer, ev, s.Name(), prepErr)
		return o
	}
	// On a partitioned inbox the file's SQL must write event_time; the
	// partition it lands in is made here, as for the built-ins.
	if attempts, err := in.retry(ctx, func(ctx context.Context) error { return in.ensurePartitions(ctx, ev) }); err != nil {
		o := newOutcome(ev)
		o.Err, o.Attempts = eventErr(consumer, ev, s.Name(), err), attempts
		return o
	}
	start := time.Now()
	var o Outcome
	switch {
	case s.f.header["outcome"] == OutcomeBatch:
		// The parking code calls this for one event and keeps the parked
		// table itself: no sweep.
		outs, _ := s.applyBatchSQL(ctx, in, r, consumer, []*envelope.Event{ev}, false)
		o = outs[0]
	case s.f.header["outcome"] == OutcomeResult:
		o = s.applyResult(ctx, in, r, consumer, ev)
	case s.f.header["transaction"] == TxSplit:
		o = s.applySplit(ctx, in, r, consumer, ev)
	default:
		o = s.applyRows(ctx, in, r, consumer, ev)
	}
	o.Duration = time.Since(start)
	return o
}

// PrefersBatches implements Batching: a file with a @batch section is
// handed batches, as the built-in batch strategy is.
func (s *FileStrategy) PrefersBatches() bool { return s.f.header["outcome"] == OutcomeBatch }

// Declares reports whether the file's header declares a feature it
// implements (FeatureIdempotencyKeys).
func (s *FileStrategy) Declares(feature string) bool { return s.f.header[feature] == "true" }

// ready returns the statements for in's schema, preparing the schema
// first if nobody did (a library caller that went straight to Apply): the
// DDL must have run and the parameter types must be known.
func (s *FileStrategy) ready(ctx context.Context, in *Inbox) (*fileSQL, error) {
	k := tableKey{in.Schema(), in.opt.AccountTable}
	s.mu.Lock()
	done := s.prepared[k]
	s.mu.Unlock()
	if !done {
		if err := s.prepare(ctx, in.pool, k); err != nil {
			return nil, err
		}
	}
	return s.sqlFor(k)
}

// errNotDecided is returned inside a retry loop when the SQL raised IB001
// and the version read says the predecessor committed meanwhile.
var errNotDecided = errors.New("not decided")

// applyResult runs the @apply statements and reads the result column.
// One statement runs on its own (autocommit, one round trip, like the cte
// strategy); several run in one transaction. Whatever the result, what
// the SQL wrote commits: it is the SQL under test, and the checker judges
// it. SQLSTATE IB001 (raised by {{schema}}.inbox_not_applied) rolls the
// statement back and leaves the decision to the account's version.
func (s *FileStrategy) applyResult(ctx context.Context, in *Inbox, r *fileSQL, consumer string, ev *envelope.Event) Outcome {
	out := newOutcome(ev)
	var res string
	var last *renderedStmt
	attempts, err := in.retry(ctx, func(ctx context.Context) error {
		for try := 0; ; try++ {
			var err error
			res, last, err = s.runApply(ctx, in, r, consumer, ev)
			if pgCode(err) != codeNotApplied {
				return err
			}
			// Not applied and rolled back: stale, a gap, or the
			// predecessor committed after the statement's snapshot.
			var cur int64
			if err := in.pool.QueryRow(ctx, in.sql.accountLock, ev.Subject).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("read version of %s after IB001: %w", ev.Subject, err)
			}
			switch v := ev.AggregateVersion; {
			case v <= cur:
				res = Stale.String()
				return nil
			case v > cur+1:
				res = Gap.String()
				return nil
			case try >= 2:
				return fmt.Errorf("%w: %s is at version %d, yet the statement did not apply version %d (IB001) three times", errNotDecided, ev.Subject, cur, v)
			}
		}
	})
	out.Attempts = attempts
	if err != nil {
		out.Err = eventErr(consumer, ev, s.Name(), s.stmtErr(last, err))
		return out
	}
	rr, perr := ParseResult(res)
	if perr != nil {
		out.Err = eventErr(consumer, ev, s.Name(), s.stmtErr(last, perr))
		return out
	}
	out.Result = rr
	if rr == Parked {
		in.counters.parked.Add(1)
	}
	return out
}

// runApply executes the @apply statements once; it returns the result
// column of the last one and the statement that failed or answered.
func (s *FileStrategy) runApply(ctx context.Context, in *Inbox, r *fileSQL, consumer string, ev *envelope.Event) (string, *renderedStmt, error) {
	last := r.apply[len(r.apply)-1]
	if len(r.apply) == 1 {
		res, err := queryResult(ctx, in.pool, last, consumer, ev)
		return res, last, err
	}
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("begin: %w", err)
	}
	for _, st := range r.apply[:len(r.apply)-1] {
		if _, err := tx.Exec(ctx, st.sql, eventArgs(st, consumer, ev)...); err != nil {
			return "", st, rollback(ctx, tx, err)
		}
	}
	res, err := queryResult(ctx, tx, last, consumer, ev)
	if err != nil {
		return "", last, rollback(ctx, tx, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return "", last, fmt.Errorf("commit: %w", err)
	}
	return res, last, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryResult runs st and returns its result column from exactly one row.
func queryResult(ctx context.Context, q querier, st *renderedStmt, consumer string, ev *envelope.Event) (string, error) {
	rows, err := q.Query(ctx, st.sql, eventArgs(st, consumer, ev)...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	idx := -1
	for i, fd := range rows.FieldDescriptions() {
		if fd.Name == "result" {
			idx = i
			break
		}
	}
	var res *string
	n := 0
	for rows.Next() {
		n++
		if n > 1 || idx < 0 {
			continue
		}
		vals, err := rows.Values()
		if err != nil {
			return "", err
		}
		if v, ok := vals[idx].(string); ok {
			res = &v
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	switch {
	case idx < 0:
		return "", errors.New("the statement returned no result column")
	case n != 1:
		return "", fmt.Errorf("the statement returned %d rows: want exactly one row with the result column", n)
	case res == nil:
		return "", errors.New("the result column is NULL or not text")
	}
	return *res, nil
}

// execEffect runs the @effect statements and counts the rows they
// changed: INSERT, UPDATE, DELETE and MERGE count; a SELECT (a lookup, a
// function call) does not.
func execEffect(ctx context.Context, tx pgx.Tx, r *fileSQL, consumer string, ev *envelope.Event) (int64, *renderedStmt, error) {
	var n int64
	for _, st := range r.effect {
		tag, err := tx.Exec(ctx, st.sql, eventArgs(st, consumer, ev)...)
		if err != nil {
			return 0, st, err
		}
		if tag.Insert() || tag.Update() || tag.Delete() || strings.HasPrefix(tag.String(), "MERGE") {
			n += tag.RowsAffected()
		}
	}
	return n, nil, nil
}

// decideEffect is the article's rule after the claim succeeded, in tx: the
// effect changing one row is APPLIED; none, the version (read under the
// account's row lock) says STALE or GAP, or, when the predecessor just
// committed, the effect is tried again. commit reports whether to commit.
func (s *FileStrategy) decideEffect(ctx context.Context, in *Inbox, tx pgx.Tx, r *fileSQL, consumer string, ev *envelope.Event) (res Result, commit bool, err error) {
	if in.opt.BeforeEffect != nil {
		if err := in.opt.BeforeEffect(ctx, consumer, ev); err != nil {
			return NoResult, false, fmt.Errorf("before effect: %w", err)
		}
	}
	for try := 0; ; try++ {
		n, st, err := execEffect(ctx, tx, r, consumer, ev)
		if err != nil {
			return NoResult, false, s.stmtErr(st, err)
		}
		switch {
		case n == 1:
			return Applied, true, nil
		case n > 1:
			return NoResult, false, fmt.Errorf("strategy file %s: @effect changed %d rows for one event: want 1 (applied) or 0 (not applied)", s.f.path, n)
		}
		// The lock orders this read after a predecessor's commit. Unlike
		// the built-in path, a missing account is not created: the file's
		// SQL alone writes business rows.
		var cur int64
		if err := tx.QueryRow(ctx, in.sql.accountLock, ev.Subject).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return NoResult, false, fmt.Errorf("read version of %s: %w", ev.Subject, err)
		}
		switch v := ev.AggregateVersion; {
		case v <= cur:
			return Stale, false, nil
		case v > cur+1:
			return Gap, false, nil
		case try >= 2:
			return NoResult, false, fmt.Errorf("strategy file %s: %s is at version %d under lock, yet @effect changed no row for version %d", s.f.path, ev.Subject, cur, v)
		}
	}
}

func (s *FileStrategy) stmtErr(st *renderedStmt, err error) error {
	if st == nil {
		return err
	}
	return &StatementError{Path: s.f.path, Line: s.f.line(st.off), Section: st.section, Index: st.index, Err: err}
}

// applyRows is the article's transaction: claim, then effect, in one
// transaction; anything but APPLIED rolls back, claim included.
func (s *FileStrategy) applyRows(ctx context.Context, in *Inbox, r *fileSQL, consumer string, ev *envelope.Event) Outcome {
	claim := r.claim[0]
	var out Outcome
	attempts, err := in.retry(ctx, func(ctx context.Context) error {
		var err error
		out, err = in.inTx(ctx, func(tx pgx.Tx) (Outcome, bool, error) {
			o := newOutcome(ev)
			tag, err := tx.Exec(ctx, claim.sql, eventArgs(claim, consumer, ev)...)
			if err != nil {
				return o, false, s.stmtErr(claim, err)
			}
			if tag.RowsAffected() == 0 {
				o.Result = Duplicate
				return o, false, nil
			}
			res, commit, err := s.decideEffect(ctx, in, tx, r, consumer, ev)
			o.Result = res
			return o, commit, err
		})
		return err
	})
	if err != nil {
		out = newOutcome(ev)
		out.Err = eventErr(consumer, ev, s.Name(), err)
	}
	out.Attempts = attempts
	return out
}

// applySplit reproduces the article's split commit for negative controls:
// the claim commits on its own, then the effect runs in a second
// transaction that may roll back, leaving the claim behind. One attempt,
// like the built-in negative controls: a control must not retry its own
// failure away.
func (s *FileStrategy) applySplit(ctx context.Context, in *Inbox, r *fileSQL, consumer string, ev *envelope.Event) Outcome {
	out := newOutcome(ev)
	out.Attempts = 1
	fail := func(err error) Outcome {
		o := newOutcome(ev)
		o.Attempts = 1
		o.Err = eventErr(consumer, ev, s.Name(), classify(ctx, err))
		return o
	}
	claim := r.claim[0]
	tag, err := in.pool.Exec(ctx, claim.sql, eventArgs(claim, consumer, ev)...)
	if err != nil {
		return fail(s.stmtErr(claim, err))
	}
	if tag.RowsAffected() == 0 {
		out.Result = Duplicate
		return out
	}
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return fail(fmt.Errorf("begin: %w", err))
	}
	res, commit, err := s.decideEffect(ctx, in, tx, r, consumer, ev)
	if err != nil {
		return fail(rollback(ctx, tx, err))
	}
	if !commit {
		if err := tx.Rollback(ctx); err != nil {
			return fail(fmt.Errorf("rollback after %s: %w", res, err))
		}
		out.Result = res
		return out
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	out.Result = res
	return out
}

// Prune runs the file's @prune statements (retention) in in's schema with
// :before and :limit, and returns the rows they deleted. A file without
// @prune returns 0 and no error: the built-in `bench inbox prune` applies.
func (s *FileStrategy) Prune(ctx context.Context, in *Inbox, before time.Time, limit int64) (int64, error) {
	r, err := s.sqlFor(tableKey{in.Schema(), in.opt.AccountTable})
	if err != nil {
		return 0, err
	}
	var total int64
	for _, st := range r.prune {
		args := make([]any, len(st.names))
		for i, n := range st.names {
			switch n {
			case "before":
				args[i] = before
			case "limit":
				args[i] = limit
			}
		}
		tag, err := in.pool.Exec(ctx, st.sql, textArgs(st, args)...)
		if err != nil {
			return total, s.stmtErr(st, err)
		}
		total += tag.RowsAffected()
	}
	return total, nil
}

// HasPrune reports whether the file has a @prune section.
func (s *FileStrategy) HasPrune() bool { return len(s.f.sections["prune"]) > 0 }

// String is the name, for logs.
func (s *FileStrategy) String() string { return s.Name() + " (" + strconv.Quote(s.f.path) + ")" }
