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
		Run:      twoConsumers,
	})
}

// twoConsumers sends the same events to two consumers with their own
// target tables (account and audit_account) and checks both reach the
// oracle's state.
func twoConsumers(ctx context.Context, e *Env, broker string, st inbox.Strategy) Outcome {
	l, err := newLab(ctx, e, "two-consumers", broker, st, nil)
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
	var done atomic.Int64
	pol := runner.NewErrorPolicy(runner.RetryBound{})
	for i, c := range []consumerTable{{"balance-v1", l.in}, {"audit-v1", audit}} {
		sub, err := l.consumeAs(ctx, fmt.Sprintf("-%d", i), c, st, evs, pol, &done)
		if err != nil {
			return fail(err)
		}
		defer sub.Close()
	}
	for done.Load() < int64(2*len(evs)) {
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("%d of %d deliveries handled: %w", done.Load(), 2*len(evs), ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := deadLettered(pol); err != nil {
		return fail(err)
	}
	out, err := l.check(ctx, plan.Events, plan.Expected)
	if err != nil {
		return fail(err)
	}
	// The audit consumer's table against the same oracle.
	if err := l.checkTable(ctx, "audit_account", "audit-v1", plan.Expected, &out); err != nil {
		return fail(err)
	}
	out.Verdict = verdict(out.Anomalies)
	return out
}

// consumerTable is a consumer and the inbox bound to its business table.
type consumerTable struct {
	name string
	in   *inbox.Inbox
}

// consumeAs publishes evs to a topic of their own and consumes it as c,
// counting each delivery answered for good in done.
func (l *lab) consumeAs(ctx context.Context, suffix string, c consumerTable, st inbox.Strategy, evs []*envelope.Event,
	pol *runner.ErrorPolicy, done *atomic.Int64) (brokers.Subscription, error) {
	topic, err := l.topic(ctx, suffix)
	if err != nil {
		return nil, err
	}
	if err := l.publish(ctx, topic, evs...); err != nil {
		return nil, err
	}
	sub, err := l.b.Subscribe(ctx, topic, c.name, brokers.SubscribeOptions{}, brokers.PerDelivery(
		func(hctx context.Context, d *brokers.Delivery) brokers.Verdict {
			ev, err := envelope.Unmarshal(d.Body)
			if err != nil {
				return brokers.Reject
			}
			outs, _ := st.ApplyBatch(hctx, c.in, c.name, []*envelope.Event{ev})
			if outs[0].Err != nil || outs[0].Result == inbox.Gap {
				v, final := undecided(hctx, pol, d, ev, outs[0])
				if final {
					done.Add(1)
				}
				return v
			}
			done.Add(1)
			return brokers.Ack
		}))
	if err != nil {
		return nil, fmt.Errorf("%s: subscribe %s: %w", l.b.Name(), topic, err)
	}
	return sub, nil
}

// checkTable compares a consumer's business table with the oracle and
// counts a lost effect for every aggregate off it.
func (l *lab) checkTable(ctx context.Context, table, consumer string, want map[string]workload.State, out *Outcome) error {
	rows, err := l.pool.Query(ctx, "SELECT id, balance, version FROM "+pgx.Identifier{l.schema, table}.Sanitize())
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
