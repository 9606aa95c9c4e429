package conform

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// Effects beyond the database: the faults of an external call, through
// the runner with the external service in this process (docs/running.md,
// "Effects beyond the database"). These scenarios judge the strategies
// that call the service (inbox.CallsExternal), and only them: a
// database-only strategy has no call to judge, and an external one is
// judged here rather than in the database scenarios (Scenario.External).
func init() {
	ext := func(name, proves string, catches []string, faults string, opts ...func(*runner.Options, *Env)) *Scenario {
		return &Scenario{Name: name, Proves: proves, Timeout: 4 * time.Minute, Catches: catches, External: true,
			Run: func(ctx context.Context, c Cell) Outcome {
				return runStream(ctx, c, faults, append([]func(*runner.Options, *Env){externalSpec}, opts...)...)
			}}
	}
	register(ext("external-timeout", "10% of external calls are applied by the service and answered only after the caller gave up: every event is paid exactly once (the retry carries the same key, or asks for the key's result)",
		[]string{"broken-ext-new-key", "broken-ext-after-commit", "broken-ext-exists"}, "external_timeout: 0.1"))
	register(ext("external-crash", "the handler dies between the external call and the database commit on 5% of events: the redelivery finishes each with the same key (an expired lease by querying the key's result), none paid twice or left in flight",
		[]string{"broken-ext-new-key", "broken-ext-exists"}, "crash_after_call: 0.05"))
	register(ext("external-ack-lost", "the handler commits, then dies before the ack on 5% of events: the redelivery is a duplicate and calls nothing again",
		nil, "crash_after_commit: 0.05"))
	register(ext("external-unavailable", "the external service refuses every call for 1.5 s a third into the stream: the calls are sent again until it is back, none lost",
		[]string{"broken-ext-after-commit", "broken-ext-exists"}, "external_unavailable: 1500ms"))
	register(&Scenario{Name: "external-worker-crash", Timeout: 5 * time.Minute, External: true, Catches: []string{"broken-ext-new-key", "broken-ext-exists"},
		Proves: "two bench worker processes consume; a few are killed with kill -9 between the external call and the database commit, the transaction open, and replaced: every event is paid exactly once",
		Needs:  outOfProcess,
		Run: func(ctx context.Context, c Cell) Outcome {
			if len(c.Env.WorkerCmd) == 0 {
				return fail(errors.New("external-worker-crash needs the bench program to start workers with (conform.Env.WorkerCmd)"))
			}
			st := c.Strategy
			out := runStream(ctx, c, "crash_after_call: 0.02", externalSpec, func(o *runner.Options, e *Env) {
				o.Workers = runner.Workers{Local: 2, Cmd: e.WorkerCmd}
				o.Spec.Consumers = 2
			})
			// An outbox's calls are its relay's, in this process: no
			// worker dies there.
			_, relays := st.(inbox.Relaying)
			if out.Err == nil && out.crashes == 0 && !st.Broken() && !relays {
				return fail(errors.New("no worker process was killed: the scenario proved nothing"))
			}
			if out.Err == nil {
				out.Line = fmt.Sprintf("external-worker-crash: %s/%s workers=2 killed=%d", c.Broker, st.Name(), out.crashes)
			}
			return out
		}})
}

// externalSpec is the external service of every external scenario: a
// fast service, callers that give up soon, a lease that expires soon, so
// that a fault costs the scenario seconds.
func externalSpec(o *runner.Options, _ *Env) {
	o.Spec.External = workload.External{Delay: workload.Duration(time.Millisecond), Timeout: workload.Duration(200 * time.Millisecond),
		Lease: workload.Duration(500 * time.Millisecond)}
}
