package conform

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// lab is one scenario cell's database and broker: a fresh schema with the
// checker's audit trigger, an inbox bound to it, and a topic of its own.
type lab struct {
	broker   string
	pool     *pgxpool.Pool
	in       *inbox.Inbox
	st       inbox.Strategy
	b        brokers.Broker
	schema   string
	consumer string
}

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

func uniqueName(parts ...string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	n := strings.ToLower("cf_" + strings.Join(parts, "_"))
	n = unsafe.ReplaceAllString(n, "_")
	if len(n) > 50 {
		n = n[:50]
	}
	return n + "_" + hex.EncodeToString(r[:])
}

// newLab prepares cell c. opt adjusts the inbox options (parking, hooks).
func newLab(ctx context.Context, c Cell, opt func(*inbox.Options)) (*lab, error) {
	e, broker, st := c.Env, c.Broker, c.Strategy
	schema := uniqueName(c.Scenario, broker, st.Name())
	pcfg, err := pgxpool.ParseConfig(e.Cfg.PGURL)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	pcfg.MaxConns = 12
	pcfg.ConnConfig.RuntimeParams["application_name"] = runner.AppName(schema)
	io := inbox.DefaultOptions()
	io.Schema = schema
	if opt != nil {
		opt(&io)
	}
	inbox.ConfigurePool(pcfg, io)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	l := &lab{broker: broker, pool: pool, st: st, schema: schema, consumer: "balance-v1"}
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		l.close()
		return nil, fmt.Errorf("postgres: migrate %s: %w", schema, err)
	}
	// A user strategy file brings its own DDL and statements, checked by
	// the server here, after the built-in schema and before the audit.
	if p, ok := st.(inbox.Preparer); ok {
		if err := p.Prepare(ctx, pool, schema); err != nil {
			l.close()
			return nil, err
		}
	}
	if err := inbox.InstallAudit(ctx, pool, schema, inbox.AuditStatement); err != nil {
		l.close()
		return nil, err
	}
	if l.in, err = inbox.New(pool, io); err != nil {
		l.close()
		return nil, err
	}
	if l.b, err = brokers.Open(ctx, broker, e.Cfg, nil); err != nil {
		l.close()
		return nil, fmt.Errorf("%s: %w", broker, err)
	}
	return l, nil
}

// newTopicLab is newLab with the cell's one-shard topic set up (see
// topic), for the experiments that need a single topic; on an error
// nothing is left open.
func newTopicLab(ctx context.Context, c Cell, opt func(*inbox.Options)) (*lab, string, error) {
	l, err := newLab(ctx, c, opt)
	if err != nil {
		return nil, "", err
	}
	topic, err := l.topic(ctx, "")
	if err != nil {
		l.close()
		return nil, "", err
	}
	return l, topic, nil
}

func (l *lab) close() {
	if l.b != nil {
		l.b.Close()
	}
	if l.pool != nil {
		l.pool.Close()
	}
}

// topic creates a one-shard topic for the cell.
func (l *lab) topic(ctx context.Context, suffix string) (string, error) {
	t := strings.ReplaceAll(l.schema, "_", "-") + suffix
	if err := l.b.Setup(ctx, t, 1); err != nil {
		return "", fmt.Errorf("%s: set up %s: %w", l.b.Name(), t, err)
	}
	return t, nil
}

func (l *lab) publish(ctx context.Context, topic string, evs ...*envelope.Event) error {
	msgs := make([]brokers.Message, len(evs))
	for i, ev := range evs {
		body, err := envelope.Marshal(ev)
		if err != nil {
			return err
		}
		msgs[i] = brokers.Message{Key: ev.Subject, ID: ev.Key(), Body: body}
	}
	if err := brokers.FirstError(l.b.Publish(ctx, topic, msgs)); err != nil {
		return fmt.Errorf("%s: publish to %s: %w", l.b.Name(), topic, err)
	}
	return nil
}

// got is one delivery and what the inbox decided for it.
type got struct {
	d   *brokers.Delivery
	ev  *envelope.Event
	out inbox.Outcome
}

// applyEach is the handler of the scenarios' consumers: each delivery's
// event applied alone with the cell's strategy, on in for consumer, and
// answered as then says; a body that is not an event is rejected.
func (l *lab) applyEach(in *inbox.Inbox, consumer string, then func(ctx context.Context, g got) brokers.Verdict) brokers.Handler {
	return brokers.PerDelivery(func(ctx context.Context, d *brokers.Delivery) brokers.Verdict {
		ev, err := envelope.Unmarshal(d.Body)
		if err != nil {
			return brokers.Reject
		}
		outs, _ := l.st.ApplyBatch(ctx, in, consumer, []*envelope.Event{ev})
		return then(ctx, got{d: d, ev: ev, out: outs[0]})
	})
}

// policy decides the verdict for the nth delivery after its apply.
type policy func(n int, g got) brokers.Verdict

// reader is what a scenario's consumers of one topic report: each
// delivery on ch, counted across their subscriptions.
type reader struct {
	topic string
	ch    chan got
	mu    sync.Mutex
	n     int
}

func newReader(topic string, capacity int) *reader {
	return &reader{topic: topic, ch: make(chan got, capacity)}
}

// consume subscribes to r's topic (group g1) with a handler that applies
// each delivery with the cell's strategy, reports it to r and answers
// what pol says.
func (l *lab) consume(ctx context.Context, r *reader, pol policy) (brokers.Subscription, error) {
	h := l.applyEach(l.in, l.consumer, func(ctx context.Context, g got) brokers.Verdict {
		r.mu.Lock()
		r.n++
		n := r.n
		r.mu.Unlock()
		v := pol(n, g)
		select {
		case r.ch <- g:
		case <-ctx.Done():
		}
		return v
	})
	return l.b.Subscribe(ctx, r.topic, "g1", brokers.SubscribeOptions{Prefetch: 1}, h)
}

// next waits for the next reported delivery.
func (r *reader) next(ctx context.Context, what string) (got, error) {
	select {
	case g := <-r.ch:
		return g, nil
	case <-ctx.Done():
		return got{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
}

// state reads order-42's balance and version and the consumer's inbox rows.
func (l *lab) state(ctx context.Context, agg string) (balance, version, inboxRows int64, err error) {
	s := pgx.Identifier{l.schema}.Sanitize()
	err = l.pool.QueryRow(ctx, "SELECT coalesce(sum(balance),0), coalesce(max(version),0) FROM "+s+".account WHERE id = $1", agg).Scan(&balance, &version)
	if err != nil {
		return
	}
	err = l.pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".inbox WHERE consumer = $1", l.consumer).Scan(&inboxRows)
	return
}

// check runs the runner's checker against a hand-made plan.
func (l *lab) check(ctx context.Context, events []*envelope.Event, expected map[string]workload.State) (Outcome, error) {
	at := runner.Tables{Schema: l.schema, Consumer: l.consumer, Audited: true}
	inv, _, err := runner.Check(ctx, l.pool, at, &workload.Plan{Events: events, Expected: expected})
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Verdict: inv.Verdict, Anomalies: inv.Anomalies, Examples: inv.Examples}, nil
}

// settled reads the balance of order-42, the aggregate of every event,
// and the inbox's rows, and checks the inbox against evs ending at want.
func (l *lab) settled(ctx context.Context, evs []*envelope.Event, want workload.State) (out Outcome, balance, inboxRows int64, err error) {
	if balance, _, inboxRows, err = l.state(ctx, "order-42"); err != nil {
		return Outcome{}, 0, 0, err
	}
	out, err = l.check(ctx, evs, map[string]workload.State{"order-42": want})
	return out, balance, inboxRows, err
}

// event builds one of the article's events for order-42.
func event(id string, version, amount int64) *envelope.Event {
	return &envelope.Event{SpecVersion: envelope.SpecVersion, Source: "payments", ID: id, Type: "payment.recorded",
		Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Subject: "order-42", AggregateVersion: version,
		Kind: envelope.Increment, Amount: amount}
}

func fail(err error) Outcome { return Outcome{Verdict: results.VerdictError, Err: err} }

var errNotRedelivered = errors.New("the unacknowledged delivery did not come back")

// undecided answers a delivery whose event the inbox did not decide (an
// error, or a GAP nobody parks) as `bench run` does: sent back while a
// retryable failure is within the bound, dead-lettered otherwise — never
// acked as if applied. final reports a dead letter.
func undecided(ctx context.Context, pol *runner.ErrorPolicy, g got) (v brokers.Verdict, final bool) {
	ev := g.ev
	f := inbox.Failure{Kind: "version_gap", Retryable: true, Message: fmt.Sprintf("%s v%d was not parked and its predecessor did not come", ev.Subject, ev.AggregateVersion)}
	if g.out.Err != nil {
		f = inbox.Describe(g.out.Err)
	}
	v = pol.Verdict(ctx, ev.Key()+"#"+g.d.ID, ev, f)
	return v, v == brokers.Reject
}

// deadLettered is the error of a scenario whose deliveries were given up
// on: it did not run what it meant to prove.
func deadLettered(pol *runner.ErrorPolicy) error {
	for _, f := range pol.Failures() {
		if f.DeadLettered > 0 {
			return fmt.Errorf("%d deliveries dead-lettered, first: %s", f.DeadLettered, results.FailureLine(f))
		}
	}
	return nil
}
