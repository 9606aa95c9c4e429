package conform

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
)

// crash-with-backlog: a consumer dies while it holds a known number of
// deliveries it received and did not handle, so a driver that settled
// any of them on receipt loses exactly those, every time. ack-lost and
// consumer-crash crash right after a commit, when what a consumer holds
// beyond its batch depends on the moment; here the whole stream waits in
// the broker before the consumers start, and the fault holds each dying
// consumer's batch until its subscription holds another one beyond it
// (brokers.HoldForBacklog, the fault the driver suite holds every driver
// to as well).

// backlogCrashes is how many consumers die per cell: one per consumer of
// the two.
const backlogCrashes = 2

// registerBacklog registers the scenario (after consumer-crash).
func registerBacklog() {
	register(&Scenario{Name: "crash-with-backlog", Timeout: 5 * time.Minute,
		Catches: []string{"broken-ack-before-commit", runner.EarlySettle},
		Proves:  "the whole stream waits in the broker; twice a consumer's handler holds its batch, uncommitted, until the broker has handed the consumer another batch beyond it, and the consumer dies (kill -9 of a bench worker process; the subscription torn down where the broker lives in the process; a service's instance killed with kill -9 while it works through a backlog): everything it held comes again, nothing lost",
		Needs: func(bc brokers.Capabilities) string {
			if bc.Baseline {
				return "has no transport: its handler gets the head of its queue and nothing is received ahead of it, so no consumer can die holding a backlog"
			}
			return ""
		},
		Run: crashWithBacklog})
}

// crashWithBacklog runs the scenario's cell: worker processes killed with
// kill -9 where the broker is another process and the bench program is at
// hand, else in-process consumers whose subscription is torn down; a
// service is killed from outside (killInstances).
func crashWithBacklog(ctx context.Context, c Cell) Outcome {
	if c.Service != nil {
		return killInstances(ctx, c)
	}
	workers := len(c.Env.WorkerCmd) > 0 && !caps(c.Env.Cfg, c.Broker).InProcess
	out := runStream(ctx, c, "", func(o *runner.Options, e *Env) {
		o.Stream.Backlog = true // every consumer is handed more than it handles at once
		o.Stream.CrashWithBacklog = backlogCrashes
		o.Spec.Consumers = 2
		if workers {
			o.Workers = runner.Workers{Local: 2, Cmd: e.WorkerCmd}
		}
	})
	if out.Err != nil {
		return out
	}
	held := heldBacklogs(out.Notes)
	if out.Verdict == results.VerdictPass {
		// A PASS that proved less is ERROR, the notes kept: what happened
		// instead is in them. A FAIL stands: the checker named what was
		// lost (a driver that settled early may leave the later consumers
		// nothing to die with).
		switch {
		case out.crashes < backlogCrashes:
			out.Err = fmt.Errorf("%d of %d consumers died holding a backlog: the scenario proved less than it says", out.crashes, backlogCrashes)
			return out
		case strings.Contains(strings.Join(out.Notes, "\n"), runner.BacklogNotReached):
			out.Err = errors.New("a consumer died without the backlog it waited for: the scenario proved less than it says (notes)")
			return out
		}
	}
	how := "in process"
	if workers {
		how = "workers=2 killed with kill -9"
	}
	out.Line = fmt.Sprintf("crash-with-backlog: %s/%s %s, died=%d holding %s delivered and unsettled", c.Broker, c.Name(), how, out.crashes, strings.Join(held, ","))
	return out
}

// heldBacklogs are the counts the runner's notes give for each consumer
// that died with a backlog (a worker's notes carry its name first).
func heldBacklogs(notes []string) []string {
	var out []string
	for _, n := range notes {
		i := strings.Index(n, "crash with a backlog ")
		if i < 0 {
			continue
		}
		var k, of, held int
		if _, err := fmt.Sscanf(n[i:], "crash with a backlog %d of %d: a consumer died holding %d", &k, &of, &held); err == nil {
			out = append(out, fmt.Sprint(held))
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}
