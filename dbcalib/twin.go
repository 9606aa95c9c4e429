package dbcalib

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/workload"
)

// Shape is what a pgbench twin and its bench run cell share: the strategy,
// the schema it runs in, and the workload's shape.
type Shape struct {
	Strategy   string // one with a twin (Twins)
	Schema     string
	Consumer   string
	Aggregates int
	Clients    int // pgbench clients = the workload's consumers
	BatchSize  int // events per transaction of batch
	Parking    bool
}

// A twin repeats one built-in strategy's statements in the strategy's
// transactions and round trips: as a pgbench script, and as the pgx
// loop's transaction (pgxloop.go).
type twin struct {
	strategy string // the strategy's name in the inbox registry
	script   func(Shape) (string, error)
	apply    func(l *loop, ctx context.Context, client, n int) error
}

// twins are the strategies that have one, each written after the
// strategy's code: tx after inbox's applyOne, batch after its batchTx.
var twins = []twin{
	{"tx", Shape.txScript, (*loop).tx},
	{"batch", Shape.batchScript, (*loop).batch},
}

// Twins lists the strategies that have a pgbench twin.
func Twins() []string {
	var out []string
	for _, t := range twins {
		out = append(out, t.strategy)
	}
	return out
}

// twinOf is the strategy's twin, if it has one.
func twinOf(strategy string) (twin, bool) {
	i := slices.IndexFunc(twins, func(t twin) bool { return t.strategy == strategy })
	if i < 0 {
		return twin{}, false
	}
	return twins[i], true
}

// batched reports whether the built-in strategy applies events in batches
// (inbox.Batching): its twin's transactions then apply batch_size events.
func batched(strategy string) bool {
	st, err := inbox.Lookup(strategy)
	if err != nil {
		return false
	}
	b, ok := st.(inbox.Batching)
	return ok && b.PrefersBatches()
}

// perClient is how many aggregates each client owns. Client c owns
// aggregates c, c+Clients, c+2·Clients …, as a bench run consumer owns the
// keys of its shards: no two clients ever touch the same account.
func (s Shape) perClient() int { return s.Aggregates / s.Clients }

// EventsPerTx is how many events one pgbench transaction applies.
func (s Shape) EventsPerTx() int {
	if batched(s.Strategy) {
		return s.BatchSize
	}
	return 1
}

// check names what the twin cannot reproduce.
func (s Shape) check() error {
	if _, ok := twinOf(s.Strategy); !ok {
		return fmt.Errorf("strategy %q has no pgbench twin: use %s", s.Strategy, strings.Join(Twins(), " or "))
	}
	switch {
	case s.Clients < 1 || s.Aggregates < s.Clients:
		return fmt.Errorf("aggregates %d, consumers %d: every consumer needs at least one aggregate of its own", s.Aggregates, s.Clients)
	case batched(s.Strategy) && s.perClient() < s.BatchSize:
		return fmt.Errorf("aggregates %d over %d consumers leave %d per consumer, fewer than batch_size %d: a batch must touch distinct aggregates; raise aggregates to at least %d",
			s.Aggregates, s.Clients, s.perClient(), s.BatchSize, s.Clients*s.BatchSize)
	}
	return nil
}

// The twins compute every parameter of the strategy's statements from
// pgbench variables: :n counts the client's transactions (pgbench keeps a
// client's variables from one transaction to the next), so event k of
// transaction n is the client's event number idx = n·EventsPerTx + k. It
// touches the client's aggregate idx mod perClient, at version
// idx div perClient + 1: round robin over the client's own aggregates,
// every event fresh, every version the next one. Ids and sources are
// written as the workload generator writes them (workload.AggregateID,
// workload.EventID).

// aggExpr is the aggregate id of aggregate number {A}, as
// workload.AggregateID writes it (6 digits, more when needed).
func (s Shape) aggExpr(a string) string {
	if s.Aggregates <= 1_000_000 {
		return "('acct-' || lpad((" + a + ")::text, 6, '0'))"
	}
	return "('acct-' || lpad((" + a + ")::text, greatest(6, length((" + a + ")::text)), '0'))"
}

// event are a twin's parameter expressions for event number idx.
type event struct{ agg, id, version, previous, time, amount string }

func (s Shape) event(idx string) event {
	agg := s.aggExpr(":client_id::bigint + :clients::bigint * ((" + idx + ") % :per::bigint)")
	v := "((" + idx + ") / :per::bigint + 1)"
	return event{agg: agg, id: "(" + agg + " || '-v' || " + v + "::text)", version: v,
		previous: "((" + idx + ") / :per::bigint)", time: "to_timestamp((" + idx + ")::bigint / 1000.0)",
		amount: "(1 + ((" + idx + ") * 7919) % 100)"}
}

var param = regexp.MustCompile(`\$([0-9]+)`)

// bind writes args into stmt's $1, $2 … and ends it for pgbench.
func bind(stmt string, args ...string) (string, error) {
	var err error
	out := param.ReplaceAllStringFunc(stmt, func(p string) string {
		k, _ := strconv.Atoi(p[1:])
		if k < 1 || k > len(args) {
			err = fmt.Errorf("parameter %s has no value (%d given)", p, len(args))
			return p
		}
		return "(" + args[k-1] + ")"
	})
	return out + ";\n", err
}

// statement reads a strategy statement and binds it.
func (s Shape) statement(name string, args ...string) (string, error) {
	q, err := inbox.Statement(s.Schema, name)
	if err != nil {
		return "", err
	}
	b, err := bind(q, args...)
	if err != nil {
		return "", fmt.Errorf("twin of %s: %s: %w", s.Strategy, name, err)
	}
	return b, nil
}

// Script is the pgbench script of s's twin: the strategy's own statements
// (inbox.Statement) with their parameters computed from pgbench variables,
// in the strategy's transactions and round trips.
func Script(s Shape) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	t, _ := twinOf(s.Strategy)
	return t.script(s)
}

// txScript: one event per transaction, as inbox's applyOne sends it.
func (s Shape) txScript() (string, error) {
	e := s.event(":n::bigint")
	var b strings.Builder
	b.WriteString("\\set n :n + 1\n\\set v :n / :per + 1\nBEGIN;\n")
	claim := "inbox-claim"
	if s.Parking {
		claim = "inbox-claim-guarded"
	}
	parts := []struct {
		pre, name string
		args      []string
	}{
		{"", claim, []string{":consumer", ":source", e.id, e.agg, e.version, e.time}},
		{"\\if :v = 1\n", "account-create-v1", []string{e.agg, e.amount}},
		{"\\else\n", "account-update", []string{e.agg, e.amount, e.version}},
	}
	for _, p := range parts {
		q, err := s.statement(p.name, p.args...)
		if err != nil {
			return "", err
		}
		b.WriteString(p.pre + q)
	}
	b.WriteString("\\endif\n")
	if s.Parking {
		q, err := s.statement("parked-exists", ":consumer", e.agg)
		if err != nil {
			return "", err
		}
		b.WriteString(q)
	}
	b.WriteString("COMMIT;\n")
	return b.String(), nil
}

// batchScript: BatchSize events per transaction, as inbox's batchTx sends
// them: locks, parked rows and inbox claims in one pipeline, then the one
// UPDATE of every account. The arrays the strategy builds in Go are built
// first, by one query whose results \gset keeps in variables, outside the
// transaction: it holds no lock, and each array is computed once rather
// than in every statement that takes it.
func (s Shape) batchScript() (string, error) {
	e := s.event("i")
	arrays := "SELECT array_agg(" + e.agg + " ORDER BY " + e.agg + ") AS locks, array_agg(" + e.agg + " ORDER BY i) AS aggs, " +
		"array_agg(" + e.id + " ORDER BY i) AS ids, array_agg(" + e.version + " ORDER BY i) AS versions, " +
		"array_agg(" + e.previous + " ORDER BY i) AS previous, array_agg(" + e.amount + " ORDER BY i) AS amounts, " +
		"array_agg(" + e.time + " ORDER BY i) AS times, array_agg((:source)::text) AS sources " +
		"FROM generate_series(:base::bigint, :base::bigint + :b::bigint - 1) AS i \\gset\n"
	steps := []struct {
		name string
		args []string
	}{
		{"batch-lock", []string{":locks"}},
		{"batch-parked", []string{":consumer", ":locks"}},
		{"batch-inbox-insert", []string{":consumer", ":sources", ":ids", ":aggs", ":versions", ":times"}},
		{"batch-update", []string{":aggs", ":amounts", ":previous", ":versions"}},
	}
	var b strings.Builder
	b.WriteString("\\set n :n + 1\n\\set base :n * :b\n" + arrays + "BEGIN;\n\\startpipeline\n")
	for _, st := range steps {
		if st.name == "batch-parked" && !s.Parking {
			continue
		}
		if st.name == "batch-update" {
			b.WriteString("\\endpipeline\n")
		}
		q, err := s.statement(st.name, st.args...)
		if err != nil {
			return "", err
		}
		b.WriteString(q)
	}
	b.WriteString("COMMIT;\n")
	return b.String(), nil
}

// Defines are the pgbench variables (-D) the script reads.
func (s Shape) Defines() []string {
	return []string{"n=-1", "clients=" + strconv.Itoa(s.Clients), "per=" + strconv.Itoa(s.perClient()),
		"b=" + strconv.Itoa(s.BatchSize), "consumer=" + s.Consumer, "source=" + workload.Source}
}

// Prepare creates the twin's schema as a cell's is created (the inbox
// migrations) and its accounts at (id, 0, 0). A schema of that name is
// dropped first. The audit, if any, is the caller's (inbox.InstallAudit,
// inbox.StartWALAudit).
func Prepare(ctx context.Context, db inbox.DB, s Shape) error {
	if err := inbox.DropSchema(ctx, db, s.Schema); err != nil {
		return err
	}
	if _, err := inbox.Migrate(ctx, db, s.Schema); err != nil {
		return fmt.Errorf("twin schema %s: %w", s.Schema, err)
	}
	acct := pgx.Identifier{s.Schema, "account"}.Sanitize()
	q := "INSERT INTO " + acct + " (id, balance, version) SELECT " + s.aggExpr("i") +
		", 0, 0 FROM generate_series(0, $1::int - 1) AS i; ANALYZE " + acct
	if _, err := db.Exec(ctx, strings.Replace(q, "$1::int", strconv.Itoa(s.Aggregates), 1)); err != nil {
		return fmt.Errorf("twin schema %s: accounts: %w", s.Schema, err)
	}
	return nil
}

// Verify checks the twin did what the strategy would: every event that
// claimed an inbox row moved its account exactly one version forward, so
// the inbox rows equal the sum of the versions.
func Verify(ctx context.Context, db inbox.DB, s Shape) (events int64, err error) {
	sch := pgx.Identifier{s.Schema}.Sanitize()
	var versions int64
	if err := db.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+sch+".inbox), (SELECT coalesce(sum(version), 0) FROM "+sch+".account)").
		Scan(&events, &versions); err != nil {
		return 0, fmt.Errorf("twin schema %s: %w", s.Schema, err)
	}
	if events != versions {
		return events, fmt.Errorf("twin of %s in %s: %d inbox rows but the accounts moved %d versions: its statements did not apply as the strategy's do", s.Strategy, s.Schema, events, versions)
	}
	return events, nil
}
