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
		Run:     twoConsumers,
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
	consumers := []struct {
		name string
		in   *inbox.Inbox
	}{{"balance-v1", l.in}, {"audit-v1", audit}}
	for i, c := range consumers {
		topic, err := l.topic(ctx, fmt.Sprintf("-%d", i))
		if err != nil {
			return fail(err)
		}
		if err := l.publish(ctx, topic, evs...); err != nil {
			return fail(err)
		}
		c := c
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
			return fail(fmt.Errorf("%s: subscribe %s: %w", broker, topic, err))
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
	rows, err := l.pool.Query(ctx, "SELECT id, balance, version FROM "+pgx.Identifier{l.schema, "audit_account"}.Sanitize())
	if err != nil {
		return fail(err)
	}
	got := map[string]workload.State{}
	for rows.Next() {
		var id string
		var s workload.State
		if err := rows.Scan(&id, &s.Balance, &s.Version); err != nil {
			rows.Close()
			return fail(err)
		}
		got[id] = s
	}
	rows.Close()
	var aggs []string
	for a := range plan.Expected {
		aggs = append(aggs, a)
	}
	sort.Strings(aggs)
	for _, a := range aggs {
		if want := plan.Expected[a]; got[a] != want {
			out.Anomalies["lost-effect"]++
			if len(out.Examples["lost-effect"]) < 5 {
				out.Examples["lost-effect"] = append(out.Examples["lost-effect"], fmt.Sprintf("audit-v1 %s: balance %d version %d, expected %d/%d (deduplicated by the other consumer?)", a, got[a].Balance, got[a].Version, want.Balance, want.Version))
			}
		}
	}
	out.Verdict = verdict(out.Anomalies)
	return out
}
