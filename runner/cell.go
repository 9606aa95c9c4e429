package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// A cell is one broker × strategy in one round: a fresh inbox schema, a
// fresh topic, the plan published through the broker, consumed by the
// cell's consumers into the inbox, measured, then judged. It holds what
// the round needs — the run's options, plan and workers, its broker,
// strategy and round, the names derived from them — and, once set up,
// what it runs on and counts in. Its parts each have a file and take the
// cell whole, keeping what they need: the publisher (publisher.go), the
// handler (handler.go), the consumers (consumers.go, fleetconsumers.go),
// the mid-stream actions (actions.go), the waiter (waiter.go) and the
// checker (check.go); stream.go runs them, this file sets the cell up.
//
// Two choices are made once per cell, each behind an interface: how its
// consumers run (cell.consumers) and how it is judged (cell.checker).
// Nothing downstream asks again. A `bench worker` process makes a cell of
// what the coordinator told it (cellRow.cell) and runs the same handler
// and consumers on it.
type cell struct {
	o    *Options
	plan *workload.Plan
	// broker and name are the cell's broker and strategy as the run names
	// them; strategy is the strategy itself, looked up as the cell runs.
	broker, name string
	strategy     inbox.Strategy
	// round is the cell's round: a measured one, or a warm-up round
	// (rounds.go).
	round roundNo
	fleet *fleet // nil: consumers are goroutines of this process
	// id names the cell's schema, topic and consumer group, fresh per
	// round (cellID); consumer is the inbox's consumer.
	id, consumer string
	// askDurability says whether to ask the driver what its confirms
	// mean (once per broker and run); durability is its answer.
	askDurability bool
	durability    map[string]string

	// What the cell counts in and runs on once set up (setUp).
	t     *tally
	notes *notes
	pool  *pgxpool.Pool
	in    *inbox.Inbox
	audit *cellAudit
	b     brokers.Broker
	// ext is the cell's external service, when its strategy calls one
	// (external.go).
	ext *cellExternal
	// check judges the cell (check.go); steps is it for a rate search,
	// whose steps it judges one by one.
	check checker
	steps *stepJudge
	// svc is set when the cell's consumer is a team's own service
	// (service.go) instead of the suite's.
	svc *serviceRun
}

var unsafeIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// cellID names the cell's schema, topic and consumer: fresh per run.
func cellID(runID, broker, strategy string) string {
	id := strings.ToLower(fmt.Sprintf("ib_%s_%s_%s", runID, broker, strategy))
	id = unsafeIdent.ReplaceAllString(id, "_")
	if len(id) > 60 {
		// Keep a hash of the whole id: long strategy names (user files)
		// that share a prefix must not share a schema.
		h := sha256.Sum256([]byte(id))
		id = id[:51] + "_" + hex.EncodeToString(h[:4])
	}
	return id
}

// roundCellID is the id of broker × strategy in round rn of the run: a
// warm-up round, and each round of a run of several, have a schema and a
// topic of their own.
func roundCellID(o *Options, broker, strategy string, rn roundNo) string {
	switch {
	case rn.warm:
		return cellID(o.RunID, broker, fmt.Sprintf("%s_w%d", strategy, rn.n))
	case o.Rounds > 1:
		return cellID(o.RunID, broker, fmt.Sprintf("%s_r%d", strategy, rn.n))
	}
	return cellID(o.RunID, broker, strategy)
}

// topicOf is the topic of the cell with id.
func topicOf(id string) string { return strings.ReplaceAll(id, "_", "-") }

// TopicOf is the broker topic of the cell whose schema is id
// (results.Cell.Schema).
func TopicOf(id string) string { return topicOf(id) }

func (c *cell) topic() string { return topicOf(c.id) }
func (c *cell) group() string { return "ib-" + c.id }

// AppName is the application_name of a cell's connections, which the
// contention sampler and fault actions select by. PostgreSQL keeps 63
// bytes of it, so it is cut to that here: a longer name would match
// nothing in pg_stat_activity.
func AppName(cellID string) string {
	n := "inboxbench/" + cellID
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// tables names what the checker reads of the cell.
func (c *cell) tables() Tables {
	return Tables{Schema: c.id, Consumer: c.consumer, Audited: c.o.Measure.Audit}
}

// run runs the cell and returns its result; a cell that could not run to
// its end says why (Error, with the verdict ERROR).
func (c *cell) run(ctx context.Context) results.Cell {
	res := results.Cell{Broker: c.broker, Strategy: c.name, Consumer: c.consumer, Schema: c.id}
	if err := c.runInto(ctx, &res); err != nil {
		// A client library may quote its endpoint, credentials and all.
		res.Error = c.o.Cfg.RedactSecrets(err.Error())
		if res.Invariants.Verdict == "" {
			res.Invariants.Verdict = results.VerdictError
		}
	}
	return res
}

// runInto looks the strategy up, sets the cell up, consumes its stream (or
// searches its maximum sustainable rate), judges what the database holds
// and fills res.
func (c *cell) runInto(ctx context.Context, res *results.Cell) error {
	if c.svc != nil {
		return c.runService(ctx, res)
	}
	if err := c.lookup(res); err != nil {
		return err
	}
	c.notes = &notes{}
	if c.o.Spec.Faults.InstanceKills > 0 {
		c.notes.add("faults.instance_kills kills a service's instances: the suite's own consumers crash with crash_after_commit instead")
	}
	c.t = newTally(c.o.Measure.Latency, c.o.Limits.Retry, len(c.plan.Publishes)+len(c.o.Stream.Poison))
	var err error
	if c.ext, err = c.setUpExternal(ctx); err != nil {
		return err
	}
	if err := c.setUp(ctx, res); err != nil {
		return err
	}
	defer c.close(ctx)
	defer c.ext.stopRelay() // a cell that ended early never flushed it
	s := c.consume(ctx)
	if !s.started {
		// Nothing was consumed, nor published: there is nothing to judge.
		return s.err
	}
	v, err := c.judge(ctx, s)
	if err != nil {
		return errors.Join(s.err, err)
	}
	return errors.Join(s.err, c.fillResult(res, s, v))
}

// lookup finds the cell's strategy and records what identifies it.
func (c *cell) lookup(res *results.Cell) error {
	st, err := lookupStrategy(*c.o, c.name)
	if err != nil {
		return err
	}
	c.strategy = st
	res.Broken = st.Broken()
	if f, ok := st.(*inbox.FileStrategy); ok {
		res.StrategyFile, res.StrategyHash = filepath.Base(f.Path()), f.Hash()
	}
	return nil
}

// setUp creates the cell's schema (prefilled as the workload says), starts
// its audit log, opens the broker and creates the topic, and chooses the
// cell's checker; it asks the driver what its confirms mean when the cell
// should. res records the audit mode and whether the broker is the
// baseline. What it set up is released by close, at once when it fails.
func (c *cell) setUp(ctx context.Context, res *results.Cell) error {
	if err := c.openInbox(ctx, true, c.ext.inboxOptions); err != nil {
		return err
	}
	if err := c.setUpRest(ctx, res); err != nil {
		c.close(ctx)
		return err
	}
	c.check = c.checker()
	return nil
}

// setUpRest is setUp once the inbox is open.
func (c *cell) setUpRest(ctx context.Context, res *results.Cell) error {
	if err := c.prefill(ctx); err != nil {
		return err
	}
	var err error
	if c.audit, err = c.startAudit(ctx); err != nil {
		return err
	}
	res.Audit = c.audit.mode.Describe()
	return c.openBroker(ctx, res)
}

// openBroker opens the cell's broker and creates its topic; it asks the
// driver what its confirms mean when the cell should.
func (c *cell) openBroker(ctx context.Context, res *results.Cell) error {
	var err error
	if c.b, err = brokers.Open(ctx, c.broker, c.o.Cfg, nil); err != nil {
		return fmt.Errorf("%s: %w", c.broker, err)
	}
	res.Baseline = c.b.Capabilities().Baseline
	setupCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.b.Setup(setupCtx, c.topic(), c.o.Spec.Shards)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: set up topic %s: %w", c.broker, c.topic(), err)
	}
	if c.askDurability {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c.durability = brokers.DurabilityOf(dctx, c.b, c.topic())
		cancel()
	}
	return nil
}

// close releases what setUp set up, in the reverse order.
func (c *cell) close(ctx context.Context) {
	if c.svc != nil {
		if c.svc.obs != nil {
			c.svc.obs.Close(ctx)
		}
		if c.svc.proxies != nil {
			c.svc.proxies.Close()
		}
	}
	if c.b != nil {
		c.b.Close()
	}
	if c.audit != nil {
		c.audit.close(ctx)
	}
	if c.pool != nil {
		c.pool.Close()
	}
}

// openInbox connects the cell's pool (named for the contention sampler)
// and opens its inbox; with migrate it first migrates the schema and
// prepares a user strategy (a worker joins a cell the coordinator set
// up). opt, when not nil, adds to the inbox's options (an external
// caller's).
func (c *cell) openInbox(ctx context.Context, migrate bool, opt func(*inbox.Options)) error {
	o := c.o
	iopt := inbox.DefaultOptions()
	iopt.Schema = c.id
	iopt.DisableParking = !o.Spec.ParkingOn()
	iopt.BatchSize = o.Spec.BatchSize
	if opt != nil {
		opt(&iopt)
	}
	if err := c.openPool(ctx, func(pcfg *pgxpool.Config) { inbox.ConfigurePool(pcfg, iopt) }); err != nil {
		return err
	}
	var err error
	if migrate {
		err = c.setupSchema(ctx)
	}
	if err == nil {
		c.in, err = inbox.New(c.pool, iopt)
	}
	if err != nil {
		c.pool.Close()
		return err
	}
	return nil
}

// openPool connects the cell's pool, its connections named for the
// contention sampler and the fault actions; configure, when not nil,
// tunes it further.
func (c *cell) openPool(ctx context.Context, configure ...func(*pgxpool.Config)) error {
	o := c.o
	pcfg, err := pgxpool.ParseConfig(o.Cfg.PGURL)
	if err != nil {
		return fmt.Errorf("postgres URL: %w", err)
	}
	// One connection per consumer, plus room for storms and draining.
	pcfg.MaxConns = int32(o.Spec.Consumers*2 + o.Spec.Faults.StormConsumers + 4)
	pcfg.ConnConfig.RuntimeParams["application_name"] = AppName(c.id)
	for _, f := range configure {
		f(pcfg)
	}
	if c.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// setupSchema migrates the cell's schema in the run's layout, then runs a
// user strategy file's DDL and has the server check its statements,
// before anything is published.
func (c *cell) setupSchema(ctx context.Context) error {
	if _, err := inbox.MigrateLayout(ctx, c.pool, c.id, c.o.Inbox); err != nil {
		return fmt.Errorf("postgres: migrate schema %s: %w", c.id, err)
	}
	if c.o.Inbox.Partitioned {
		c.notes.add("inbox partitioned by event time")
	}
	if p, ok := c.strategy.(inbox.Preparer); ok {
		return p.Prepare(ctx, c.pool, c.id)
	}
	return nil
}

// consumers chooses, once, how the cell's consumers run: as the run's
// worker processes (fleetconsumers.go), or as goroutines of this process
// with h (consumers.go).
func (c *cell) consumers(h *handler) consumers {
	n := c.o.Spec.Consumers
	if c.fleet != nil {
		if !c.b.Capabilities().InProcess {
			return newFleetConsumers(c)
		}
		// Its queues live in this process: no other process can consume
		// them. The same number of consumers run here instead.
		c.notes.add(fmt.Sprintf("%s lives in this process: its %d consumers ran as goroutines, not worker processes", c.broker, n))
	}
	return newLocalConsumers(c, n, h)
}

// mode names how the cell published (results.Cell.Mode).
func (c *cell) mode() results.Mode {
	switch {
	case c.o.Search != nil:
		return results.ModeRateSearch
	case c.o.Stream.Backlog:
		return results.ModeBacklog
	case c.o.Spec.PublishRate > 0:
		return results.ModeFixedRate
	}
	return results.ModeSaturated
}
