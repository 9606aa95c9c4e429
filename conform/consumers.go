package conform

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

func init() {
	register(&Scenario{
		Name:    "two-consumers",
		Proves:  "two processing responsibilities (balance-v1 and audit-v1) each apply every event once: the inbox key includes the consumer, so one never deduplicates the other",
		Timeout: 3 * time.Minute,
		Catches: []string{"broken-global-key"},
		// The audit consumer's business table is another: a strategy file
		// that does not write {{account}} puts both consumers' effects
		// into one table.
		Requires: []string{inbox.FeatureConsumerTables},
		Outside:  inLab,
		Run:      twoConsumers,
	})
}

// twoConsumers sends the same events to two consumers with their own
// target tables (account and audit_account) and checks both reach the
// oracle's state.
func twoConsumers(ctx context.Context, c Cell) Outcome {
	l, err := newLab(ctx, c, nil)
	if err != nil {
		return fail(err)
	}
	defer l.close()
	if err := inbox.EnsureAccountTable(ctx, l.pool, l.schema, "audit_account"); err != nil {
		return fail(err)
	}
	opt := l.in.Options()
	opt.AccountTable = "audit_account"
	audit, err := inbox.New(l.pool, opt)
	if err != nil {
		return fail(err)
	}
	spec, err := workload.Parse([]byte("name: two-consumers\nseed: 3\naggregates: 5\nevents: 60\n"))
	if err != nil {
		return fail(err)
	}
	plan := workload.Generate(spec)
	var evs []*envelope.Event
	for _, p := range plan.Publishes {
		evs = append(evs, p.Event)
	}
	f := &fanOut{l: l, evs: evs, pol: runner.NewErrorPolicy(runner.RetryBound{})}
	auditTable := consumerTable{"audit-v1", "audit_account", audit}
	for i, c := range []consumerTable{{"balance-v1", "account", l.in}, auditTable} {
		sub, err := f.consume(ctx, fmt.Sprintf("-%d", i), c)
		if err != nil {
			return fail(err)
		}
		defer sub.Close()
	}
	for f.done.Load() < int64(2*len(evs)) {
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("%d of %d deliveries handled: %w", f.done.Load(), 2*len(evs), ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := deadLettered(f.pol); err != nil {
		return fail(err)
	}
	out, err := l.check(ctx, plan.Events, plan.Expected)
	if err != nil {
		return fail(err)
	}
	// The audit consumer's table against the same oracle.
	if err := l.checkTable(ctx, auditTable, plan.Expected, &out); err != nil {
		return fail(err)
	}
	out.Verdict = verdict(out.Anomalies)
	return out
}

// consumerTable is a consumer, its business table and the inbox bound to
// it.
type consumerTable struct {
	name, table string
	in          *inbox.Inbox
}

// fanOut is the two consumers' reading: each gets every event of evs on
// a topic of its own; done counts the deliveries answered for good.
type fanOut struct {
	l    *lab
	evs  []*envelope.Event
	pol  *runner.ErrorPolicy
	done atomic.Int64
}

// consume publishes the events to the lab's topic with suffix and
// consumes it as c.
func (f *fanOut) consume(ctx context.Context, suffix string, c consumerTable) (brokers.Subscription, error) {
	l := f.l
	topic, err := l.topic(ctx, suffix)
	if err != nil {
		return nil, err
	}
	if err := l.publish(ctx, topic, f.evs...); err != nil {
		return nil, err
	}
	sub, err := l.b.Subscribe(ctx, topic, c.name, brokers.SubscribeOptions{}, l.applyEach(c.in, c.name,
		func(ctx context.Context, g got) brokers.Verdict {
			if g.out.Err != nil || g.out.Result == inbox.Gap {
				v, final := undecided(ctx, f.pol, g)
				if final {
					f.done.Add(1)
				}
				return v
			}
			f.done.Add(1)
			return brokers.Ack
		}))
	if err != nil {
		return nil, fmt.Errorf("%s: subscribe %s: %w", l.b.Name(), topic, err)
	}
	return sub, nil
}

// checkTable compares consumer c's business table with the oracle and
// counts a lost effect for every aggregate off it.
func (l *lab) checkTable(ctx context.Context, c consumerTable, want map[string]workload.State, out *Outcome) error {
	consumer := c.name
	rows, err := l.pool.Query(ctx, "SELECT id, balance, version FROM "+pgx.Identifier{l.schema, c.table}.Sanitize())
	if err != nil {
		return err
	}
	got := map[string]workload.State{}
	var id string
	var st workload.State
	if _, err := pgx.ForEachRow(rows, []any{&id, &st.Balance, &st.Version}, func() error { got[id] = st; return nil }); err != nil {
		return err
	}
	aggs := make([]string, 0, len(want))
	for a := range want {
		aggs = append(aggs, a)
	}
	sort.Strings(aggs)
	for _, a := range aggs {
		if w := want[a]; got[a] != w {
			out.Anomalies["lost-effect"]++
			if len(out.Examples["lost-effect"]) < 5 {
				out.Examples["lost-effect"] = append(out.Examples["lost-effect"], fmt.Sprintf("%s %s: balance %d version %d, expected %d/%d (deduplicated by the other consumer?)",
					consumer, a, got[a].Balance, got[a].Version, w.Balance, w.Version))
			}
		}
	}
	return nil
}
