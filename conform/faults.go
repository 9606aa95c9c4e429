package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/workload"
)

// Production faults at small scale: each runs a short deterministic
// workload through the runner (the same publisher, consumers, fault plan
// and checker as `bench run`) with one fault turned up.
func init() {
	stream := func(name, proves string, catches []string, faults string, opts ...func(*runner.Options, *Env)) *Scenario {
		return &Scenario{Name: name, Proves: proves, Timeout: 4 * time.Minute, Catches: catches,
			Run: func(ctx context.Context, c Cell) Outcome {
				return runStream(ctx, c, faults, opts...)
			}}
	}
	ackLost := stream("ack-lost", "consumers commit and die before the ack on 1.5% of events: every redelivery is deduplicated, nothing is lost",
		[]string{"broken-ack-before-commit", "broken-broker-dedup", runner.EarlySettle}, "crash_after_commit: 0.015")
	ackLost.Outside = "tells the suite's own consumer to die between its commit and its ack; a service is killed from outside instead (consumer-crash, connection-cut)"
	register(ackLost)
	register(&Scenario{Name: "consumer-crash", Timeout: 8 * time.Minute, Catches: []string{"broken-ack-before-commit", "broken-broker-dedup", runner.EarlySettle},
		Proves: "two bench worker processes consume; a few are killed with kill -9 between the commit and the ack and replaced (a service: all its instances killed with kill -9, twice, while they work through a backlog, and started again): every redelivery is deduplicated, nothing is lost",
		Needs:  outOfProcess,
		Run: func(ctx context.Context, c Cell) Outcome {
			if c.Service != nil {
				return killInstances(ctx, c)
			}
			if len(c.Env.WorkerCmd) == 0 {
				return fail(errors.New("consumer-crash needs the bench program to start workers with (conform.Env.WorkerCmd)"))
			}
			out := runStream(ctx, c, "crash_after_commit: 0.015", func(o *runner.Options, e *Env) {
				o.Workers = runner.Workers{Local: 2, Cmd: e.WorkerCmd}
				o.Spec.Consumers = 2
			})
			if out.Err == nil && out.crashes == 0 && !c.Broken() {
				return fail(errors.New("no worker process was killed: the scenario proved nothing"))
			}
			if out.Err == nil {
				out.Line = fmt.Sprintf("consumer-crash: %s/%s workers=2 killed=%d", c.Broker, c.Strategy.Name(), out.crashes)
			}
			return out
		}})
	registerBacklog()
	retry := stream("publisher-retry", "a producer re-sends 20% of events right after themselves with the same id: each takes effect once",
		nil, "publisher_retry: 0.2")
	retry.Covers = []string{"broken-broker-dedup"} // the broker drops the retry: what its window is for
	register(retry)
	register(stream("republish-new-message", "upstream republishes 20% of events later as new transport messages with the same event id: each takes effect once, and the inbox recognises every copy (DUPLICATE)",
		[]string{"broken-ttl-dedup", "broken-broker-dedup"}, "duplicate_republish: 0.2"))
	register(stream("rebalance", "consumers leave and rejoin the group twice mid-stream: partitions/queues move without loss or double effect",
		nil, "consumer_restarts: 2", func(o *runner.Options, e *Env) { o.Spec.Consumers = 3 }))
	register(stream("reorder", "10% of successors are published before their predecessor: gaps are parked and drained in order, never skipped",
		[]string{"broken-no-version", "broken-split"}, "out_of_order: 0.1"))
	storm := stream("duplicate-storm", "30% of events are delivered to four consumers at once: the primary key lets exactly one apply",
		[]string{"broken-check-then-insert"}, "concurrent_duplicates: 0.3\n  storm_consumers: 4")
	storm.Outside = "hands one delivery to several of the suite's own consumers at once; a service's instances get what its broker gives them"
	register(storm)
	register(stream("hot-aggregate", "80% of events hit one aggregate with four consumers: contention on one row, still one effect each",
		[]string{"broken-aggregate-key"}, "", func(o *runner.Options, e *Env) {
			o.Spec.Skew = workload.Skew{Kind: "hot", HotShare: 0.8}
			o.Spec.Consumers = 4
		}))
	register(stream("snapshot", "30% of events are full-state snapshots (keep-latest), some out of order: snapshots overwrite older state, increments are never skipped",
		nil, "out_of_order: 0.05", func(o *runner.Options, e *Env) { o.Spec.SnapshotRatio = 0.3 }))
	idem := stream("idempotency-conflict", "requests are replayed under new event ids and their keys reused with other amounts: replays return the stored result, conflicts are rejected",
		nil, "idempotency_conflicts: 0.2")
	idem.Requires = []string{inbox.FeatureIdempotencyKeys}
	register(idem)
	register(&Scenario{Name: "db-connection-kill", Timeout: 4 * time.Minute, CatchesOutside: []string{"broken-ack-before-commit"},
		Proves: "the consumers' database connections are terminated twice mid-stream, mid-transaction (a service's: found by the ports its processes hold, while it works through a backlog): the events are retried, none lost or doubled",
		Run: func(ctx context.Context, c Cell) Outcome {
			var killed atomic.Int64
			out := runStream(ctx, c, "", func(o *runner.Options, e *Env) {
				if c.Service != nil {
					// Terminating idle connections would leave the verdict
					// to the next event each applies on a dead one: a
					// service that acknowledged first and drops what fails
					// loses nothing when that is a redelivered copy, as a
					// rebalance on a loaded host can make it (a CI run once
					// saw such a service PASS). Busy with a backlog, every
					// instance holds fresh work when its connection dies.
					whileBusy(o, "pg_terminate_backend on the service's connections", killConnections(e, &killed))
					return
				}
				o.Spec.PublishRate = 200 // a live stream while the connections die
				twice(o, runner.Action{Name: "pg_terminate_backend on consumer connections", Do: killConnections(e, &killed)})
			})
			if out.Err == nil && killed.Load() == 0 {
				return fail(errors.New("no consumer connection was open when the faults fired: the scenario proved nothing"))
			}
			out.Notes = append(out.Notes, fmt.Sprintf("%d consumer connections terminated", killed.Load()))
			return out
		}})
	register(stream("poison", "malformed payloads among valid events: each is dead-lettered and counted (a service's: found in the broker's dead-letter destination), the stream continues",
		nil, "", func(o *runner.Options, e *Env) { o.Stream.Poison = poisonBodies() }))
	registerOutside()
	register(&Scenario{Name: "broker-restart", Timeout: 6 * time.Minute,
		Proves: "the broker is stopped and started mid-stream through bench stack: consumers reconnect, nothing lost or doubled",
		Needs:  outOfProcess,
		Run: func(ctx context.Context, c Cell) Outcome {
			return runStream(ctx, c, "", func(o *runner.Options, e *Env) {
				o.Spec.PublishRate = 100 // publishing goes on across the restart
				o.Stream.Actions = append(o.Stream.Actions, runner.Action{Name: "restart " + c.Broker, At: 0.3, Do: restartBroker(e)})
			})
		}})
}

// baseSpec is the small stream every fault scenario starts from.
const baseSpec = `
seed: 11
aggregates: 16
events: 400
message_size: 128
consumers: 2
shards: 4
batch_size: 50
`

// twice adds the fault a to the stream at 30% and again at 60% of it: a
// fault that hits once may by luck land where nothing is in flight.
func twice(o *runner.Options, a runner.Action) {
	for _, at := range []float64{0.3, 0.6} {
		a.At = at
		o.Stream.Actions = append(o.Stream.Actions, a)
	}
}

// runStream runs cell c's scenario as a runner cell: the base stream
// with faults, adjusted by opts.
func runStream(ctx context.Context, c Cell, faults string, opts ...func(*runner.Options, *Env)) Outcome {
	e, name := c.Env, c.Scenario
	y := baseSpec + "name: " + name + "\n"
	if faults != "" {
		y += "faults:\n  " + faults + "\n"
	}
	spec, err := workload.Parse([]byte(y))
	if err != nil {
		return fail(fmt.Errorf("scenario %s: workload: %w", name, err))
	}
	// The statement trigger, not the WAL: a scenario judges, it does not
	// measure the strategy's cost, and decoding the WAL fails now and then
	// with XX000 "could not map filenode" when other sessions create and
	// drop tables in the database meanwhile (other scenarios, other tests);
	// the trigger catches every negative control as well (runner's tests
	// run each control under all three audit modes).
	o := runner.Options{Cfg: e.Cfg, Spec: spec, Brokers: []string{c.Broker}, RunID: uniqueName(name),
		Measure: runner.Measure{Audit: true, AuditMode: inbox.AuditStatement}, Limits: runner.Limits{Stall: 20 * time.Second}, Console: runner.Console{Progress: io.Discard},
		Output: runner.Output{NoWrite: true}}
	switch {
	case c.Service != nil:
		o.Service = c.Service
	case isRegistered(c.Strategy):
		o.Strategies = []string{c.Strategy.Name()}
	default:
		o.Extra = []inbox.Strategy{c.Strategy}
	}
	for _, f := range opts {
		f(&o, e)
	}
	var notes []string
	if caps(e.Cfg, c.Broker).BrokerDedup > 0 {
		notes = shortDedupWindow(&o)
	}
	run, _, err := runner.Run(ctx, o)
	if err != nil {
		return fail(err)
	}
	rc := run.Cells[0]
	if gapsAfterAnomalies(rc) {
		// The events dead-lettered were the successors of an effect the
		// checker names lost: their gap never filled. The anomaly is the
		// verdict, the dead letters its consequence.
		rc.Invariants.Verdict = results.VerdictFail
	}
	if rc.Invariants.Verdict == results.VerdictError || rc.Invariants.Verdict == "" {
		return fail(fmt.Errorf("%s", rc.Error))
	}
	out := Outcome{Verdict: rc.Invariants.Verdict, Anomalies: rc.Invariants.Anomalies, Examples: rc.Invariants.Examples, Notes: append(notes, rc.Notes...),
		crashes: rc.Counters.Crashes, Faults: rc.Faults, Timeline: rc.Timeline}
	if rc.Error != "" {
		out.Notes = append(out.Notes, rc.Error)
	}
	if len(o.Stream.Poison) > 0 {
		countPoison(ctx, c, rc, len(o.Stream.Poison), &out)
	}
	if strings.Contains(rc.Error, "action ") {
		// The fault itself could not be injected: the cell proves nothing.
		return fail(errors.New(rc.Error))
	}
	return out
}

// ControlDedupWindow is the deduplication window the scenarios give a
// broker that deduplicates by id itself (Capabilities.BrokerDedup;
// brokers.SettingDedupWindow), and ControlRepublishRate the publish rate
// of their republishing streams on it: a republish comes up to 1,000
// sends after its original, so at 40 msgs/s one more than 120 sends later
// comes after the window, as an upstream republish minutes later would
// after JetStream's default two minutes. Without it every republish of a
// fast stream would fall inside the window and be dropped by the broker:
// the scenario would test the broker, and neither a control that relies
// on the window alone (broken-broker-dedup) nor one whose own marks
// expire (broken-ttl-dedup) would meet a republish.
const (
	ControlDedupWindow   = 3 * time.Second
	ControlRepublishRate = 40
)

// shortDedupWindow sets o up for a broker that deduplicates by id, and
// says how in the verdict's notes.
func shortDedupWindow(o *runner.Options) []string {
	o.Cfg = o.Cfg.With(brokers.SettingDedupWindow, ControlDedupWindow.String())
	note := fmt.Sprintf("the broker's deduplication window: %s (%s)", ControlDedupWindow, brokers.SettingDedupWindow)
	if o.Spec.Faults.DuplicateRepublish > 0 {
		o.Spec.PublishRate = ControlRepublishRate
		note += fmt.Sprintf("; published at %d msgs/s, so a republish more than %d sends after its original came after the window", ControlRepublishRate, int(ControlDedupWindow.Seconds())*ControlRepublishRate)
	}
	return []string{note}
}

// gapsAfterAnomalies reports a cell that ended in ERROR only because it
// dead-lettered the successors of a lost effect (a version gap that never
// filled, and what followed it), while the checker named anomalies: a
// strategy that does not park (the external ones) turns a lost effect
// into dead letters.
func gapsAfterAnomalies(c results.Cell) bool {
	if c.Invariants.Verdict != results.VerdictError || len(c.Failures) == 0 {
		return false
	}
	for _, f := range c.Failures {
		if f.DeadLettered > 0 && f.Kind != "version_gap" && f.Kind != "predecessor_dead_lettered" {
			return false
		}
	}
	for _, n := range c.Invariants.Anomalies {
		if n > 0 {
			return true
		}
	}
	return false
}

// PoisonUncounted is counted when a malformed message was not
// dead-lettered (acked silently, or lost).
const PoisonUncounted = "poison-uncounted"

// countPoison checks that every malformed message was dead-lettered: as
// the suite's consumers counted their rejects, or, for a service, whose
// counts are not taken, as its broker's dead-letter destination holds
// them.
func countPoison(ctx context.Context, c Cell, rc results.Cell, sent int, out *Outcome) {
	got := rc.Counters.Rejected
	if c.Service != nil {
		n, err := deadLetterCount(ctx, c, runner.TopicOf(rc.Schema), sent)
		if err != nil {
			out.Notes = append(out.Notes, err.Error())
		}
		got = int64(n)
	}
	if got == int64(sent) {
		return
	}
	out.Anomalies[PoisonUncounted] += int64(sent) - got
	out.Examples[PoisonUncounted] = []string{fmt.Sprintf("%d malformed messages sent, %d dead-lettered", sent, got)}
	out.Verdict = verdict(out.Anomalies)
}

// deadLetterCount reads topic's dead-letter destination for up to want
// messages (10 s at most).
func deadLetterCount(ctx context.Context, c Cell, topic string, want int) (int, error) {
	b, err := brokers.Open(ctx, c.Broker, c.Env.Cfg, nil)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	r, ok := b.(brokers.DeadLetterReader)
	if !ok {
		return 0, fmt.Errorf("%s cannot read its dead letters back: the poison count is unknown", c.Broker)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ms, err := r.DeadLetters(ctx, topic, want)
	if err != nil && ctx.Err() == nil {
		return len(ms), err
	}
	return len(ms), nil
}

func poisonBodies() [][]byte {
	return [][]byte{
		[]byte("not json at all"),
		[]byte(`{"specversion":"1.0","source":"payments","id":"p-1","type":"t","subject":"acct-x","aggregateversion":1,"kind":"increment","amout":5}`),
		[]byte(`{"specversion":"1.0","source":"payments","type":"t","subject":"acct-x","aggregateversion":1,"kind":"increment","amount":5}`),
		[]byte(`{"specversion":"1.0","source":"payments","id":"p-3","type":"t","subject":"acct-x","aggregateversion":1,"kind":"delta","amount":5}`),
		[]byte(`{"specversion":"1.0","source":"payments","id":"p-4","type":"t","subject":"acct-x","aggregateversion":0,"kind":"increment","amount":5}`),
	}
}

func killConnections(e *Env, killed *atomic.Int64) func(ctx context.Context, c runner.CellInfo) error {
	return func(ctx context.Context, c runner.CellInfo) error {
		n, err := terminate(ctx, e, c)
		killed.Add(int64(n))
		return err
	}
}

// terminate ends every open connection of the cell's consumers,
// mid-transaction or idle, and says how many there were (none is
// possible between batches): the suite's by their application_name, a
// service's by the client ports its processes hold.
func terminate(ctx context.Context, e *Env, c runner.CellInfo) (int, error) {
	conn, err := pgx.Connect(ctx, e.Cfg.PGURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	if c.Service != nil {
		ports, err := c.Service.DBClientPorts()
		if err != nil {
			return 0, err
		}
		err = conn.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE client_port = ANY($1) AND pid <> pg_backend_pid()) t`, ports).Scan(&n)
		return n, err
	}
	err = conn.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()) t`, c.AppName).Scan(&n)
	return n, err
}

func restartBroker(e *Env) func(ctx context.Context, c runner.CellInfo) error {
	return func(ctx context.Context, c runner.CellInfo) error {
		service := brokers.InfoOf(c.Broker).Service
		if service == "" {
			return fmt.Errorf("%s runs as no stack service: nothing to restart", c.Broker)
		}
		variant, err := compose.VariantOf(e.Cfg)
		if err != nil {
			return err
		}
		env := &compose.Env{Dir: e.StackDir, Variant: variant, Cfg: e.Cfg, Out: io.Discard}
		svcs, err := compose.Select(variant, []string{service})
		if err != nil {
			return err
		}
		if _, ours := svcs[0].Procs(env)[0].PID(); !ours {
			return fmt.Errorf("%s is not run by this stack (%s): restart it yourself or skip broker-restart", c.Broker, e.StackDir)
		}
		if err := compose.Down(ctx, env, svcs, false); err != nil {
			return fmt.Errorf("stop %s: %w", c.Broker, err)
		}
		return compose.Up(ctx, env, svcs)
	}
}
