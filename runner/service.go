package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/service"
	"github.com/inboxbench/inboxbench/workload"
)

// A service cell runs a team's own consumer service (Options.Service)
// instead of the suite's consumer: the same plan is published through the
// same broker into a fresh schema, the service's instances consume it,
// and the cell observes only the service's tables — each change of its
// effects table as it commits, decoded from the WAL (service.Observer),
// and at the end its final state and inbox through the spec's SQL. The
// tally is fed from what the WAL shows, so the steady-state clock, the
// progress line, the faults' shares, the per-second series and the
// end-to-end latency (commit time minus the event's intended time) work
// as for any cell; what the service does not show in its tables (its
// deliveries, retries, dedup hits) is not counted, never taken from the
// service's word.

// serviceRun is what a service cell holds beside the cell's own state.
type serviceRun struct {
	spec    *service.Spec
	intents *service.Intents
	obs     *service.Observer
	proxies *service.Proxies
	outside brokers.OutsideEnv
	// expected are the distinct events published, once publishing ended
	// (0 before); seen the distinct versions seen taking effect.
	expected, seen atomic.Int64
	// failed is the first error reading the WAL: the history has a hole,
	// so the cell cannot be judged.
	failed atomic.Pointer[error]
}

// caughtUp reports every published event seen taking effect.
func (s *serviceRun) caughtUp() bool {
	exp := s.expected.Load()
	return exp > 0 && s.seen.Load() >= exp
}

// expect sets what the cell waits for: every distinct event of plan.
func (s *serviceRun) expect(plan *workload.Plan) {
	s.expected.Store(int64(len(plan.Events)))
}

// runService is runInto for a service cell.
func (c *cell) runService(ctx context.Context, res *results.Cell) error {
	spec := c.svc.spec
	res.Service = &results.ServiceRun{Name: spec.Name, Spec: spec.Path(), Instances: spec.Instances}
	res.Broken = spec.Mistake != ""
	c.notes = &notes{}
	c.t = newTally(c.o.Measure.Latency, c.o.Limits.Retry, len(c.plan.Publishes))
	if err := c.setUpService(ctx, res); err != nil {
		return err
	}
	defer c.close(ctx)
	s := c.consumeService(ctx, res)
	if !s.started {
		return s.err
	}
	v, err := c.check.verdict(ctx, s.plan)
	if err != nil {
		return errors.Join(s.err, err)
	}
	return errors.Join(s.err, c.fillResult(res, s, v))
}

// setUpService creates the cell's schema with the service's tables,
// opens the broker and its topic, finds how an outside consumer reaches
// it (through a proxy where the driver can route it) and starts
// observing the effects table, all before any instance starts.
func (c *cell) setUpService(ctx context.Context, res *results.Cell) error {
	spec := c.svc.spec
	if err := c.openPool(ctx); err != nil {
		return err
	}
	c.svc.proxies = service.NewProxies()
	err := c.serviceSchema(ctx)
	if err == nil {
		err = c.openBroker(ctx, res)
	}
	if err == nil {
		err = c.outside()
	}
	if err == nil {
		c.svc.obs, err = service.StartObserver(ctx, c.o.Cfg.PGURL, c.id, spec.Effects)
	}
	if err != nil {
		c.close(ctx)
		return err
	}
	res.Audit = "wal-decoding of " + spec.Effects.Table
	if c.o.Spec.InboxPrefill > 0 {
		c.notes.add("inbox_prefill fills the suite's own inbox: the service's tables started empty")
	}
	c.check = serviceCheck{c}
	return nil
}

// serviceSchema creates the cell's schema and runs the spec's schema
// file in it.
func (c *cell) serviceSchema(ctx context.Context) error {
	if _, err := c.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{c.id}.Sanitize()); err != nil {
		return fmt.Errorf("postgres: create schema %s: %w", c.id, err)
	}
	path := c.svc.spec.SchemaPath()
	if path == "" {
		return nil
	}
	ddl, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("service schema: %w", err)
	}
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{c.id}.Sanitize()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, string(ddl)); err != nil {
			return fmt.Errorf("service schema %s: %w", path, err)
		}
		return nil
	})
}

// outside asks the driver how a process outside the suite consumes the
// cell's topic, its broker connections routed through the cell's proxies.
func (c *cell) outside() error {
	out, ok := c.b.(brokers.Outside)
	if !ok || c.b.Capabilities().InProcess {
		return fmt.Errorf("%s: its queues cannot be consumed by a process outside bench: a service cannot run on it", c.broker)
	}
	env, err := out.OutsideEnv(c.topic(), c.group(), c.svc.proxies.Route)
	if err != nil {
		return err
	}
	if env.Unproxied != "" {
		c.notes.add("the service connects to " + c.broker + " directly, not through the suite's proxy (" + env.Unproxied + "): its broker connections cannot be cut")
	}
	c.svc.outside = env
	return nil
}

// instanceEnv is what instance i is told: every setting of the run as its
// INBOXBENCH_* variable, the driver's view of the topic for an outside
// consumer, the cell's names and PostgreSQL in the forms a JDBC client
// needs too.
func (c *cell) instanceEnv(i int) map[string]string {
	env := map[string]string{}
	for _, kv := range c.o.Cfg.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range c.svc.outside.Vars {
		env[k] = v
	}
	for k, v := range map[string]string{"INBOXBENCH_BROKER": c.broker, "INBOXBENCH_TOPIC": c.topic(), "INBOXBENCH_GROUP": c.group(),
		"INBOXBENCH_CONSUMER": c.consumer, "INBOXBENCH_SCHEMA": c.id, "INBOXBENCH_SHARDS": strconv.Itoa(c.o.Spec.Shards),
		"INBOXBENCH_INSTANCE": strconv.Itoa(i), "INBOXBENCH_INSTANCES": strconv.Itoa(c.svc.spec.Instances)} {
		env[k] = v
	}
	for k, v := range jdbcEnv(c.o.Cfg.PGURL, c.id) {
		env[k] = v
	}
	return env
}

var sslParam = regexp.MustCompile(`\b(sslmode|sslrootcert|sslcert|sslkey)=([^&\s]+)`)

// jdbcEnv writes the PostgreSQL URL as pgJDBC takes it: host, port and
// database in the URL with the cell's schema as currentSchema, the TLS
// parameters as they were (pgJDBC names them alike), user and password
// apart.
func jdbcEnv(pgURL, schema string) map[string]string {
	cfg, err := pgconn.ParseConfig(pgURL)
	if err != nil {
		return nil
	}
	q := []string{"currentSchema=" + schema}
	for _, m := range sslParam.FindAllStringSubmatch(pgURL, -1) {
		q = append(q, m[1]+"="+m[2])
	}
	host := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	return map[string]string{"INBOXBENCH_PG_JDBC_URL": "jdbc:postgresql://" + host + "/" + cfg.Database + "?" + strings.Join(q, "&"),
		"INBOXBENCH_PG_USER": cfg.User, "INBOXBENCH_PG_PASSWORD": cfg.Password}
}

// consumeService starts the service's instances and streams the plan
// through them; the cell's waiter waits until the WAL shows every event
// taking effect.
func (c *cell) consumeService(ctx context.Context, res *results.Cell) streamed {
	cons := newServiceConsumers(c)
	quiet := c.waitQuiet(ctx)
	checkpoints, cperr := inbox.Checkpoints(ctx, c.pool)
	n, err := c.startAtCheckpoint(ctx)
	if err != nil {
		return streamed{err: err}
	}
	// The service's backends are sampled by the ports its processes hold.
	sampler, err := inbox.StartContentionOf(ctx, c.o.Cfg.PGURL, func() []int {
		ports, _ := cons.DBClientPorts()
		return ports
	}, 100*time.Millisecond)
	if err != nil {
		return streamed{err: err}
	}
	s := c.stream(ctx, cons)
	if s.window != nil {
		s.window.QuietS = quiet.Seconds()
	}
	if cperr == nil {
		c.noteCheckpoints(ctx, checkpoints+n)
	}
	var serr error
	if s.contention, serr = sampler.Stop(ctx); serr != nil && s.err == nil {
		c.o.Console.Log.Warn("contention sampler", "err", serr)
	}
	res.Service.Kills, res.Service.Exits, res.Service.Logs = cons.kills.Load(), cons.exits.Load(), cons.logDir
	return s
}

// instanceKills are the workload's kills of a service's instances
// (faults.instance_kills): one per that share of the plan's events, at
// seeded moments between a tenth and nine tenths of the stream, each of
// a seeded instance, which is stopped, killed with kill -9 and started
// again.
func (c *cell) instanceKills() []Action {
	ratio := c.o.Spec.Faults.InstanceKills
	if ratio == 0 || c.svc == nil {
		return nil
	}
	n := max(1, int(math.Round(ratio*float64(len(c.plan.Events)))))
	rng := rand.New(rand.NewPCG(uint64(c.o.Spec.Seed), 0x6b696c6c))
	var out []Action
	for range n {
		i := rng.IntN(c.svc.spec.Instances)
		out = append(out, Action{Name: fmt.Sprintf("kill -9 instance %d", i), At: 0.1 + 0.8*rng.Float64(),
			Do: func(ctx context.Context, ci CellInfo) error {
				ci.Hit(fmt.Sprintf("instance %d killed", i))
				return ci.Service.Kill(ctx, i)
			}})
	}
	return out
}

// serviceCheck judges a service cell: the snapshot of its tables and the
// effects table's history from the WAL, against the plan.
type serviceCheck struct{ c *cell }

func (k serviceCheck) verdict(ctx context.Context, plan *workload.Plan) (verdict, error) {
	c := k.c
	if err := c.svc.failed.Load(); err != nil {
		return verdict{}, fmt.Errorf("the service's effects could not all be read from the WAL, so the cell cannot be judged: %w", *err)
	}
	keys := map[string]string{}
	for _, e := range plan.Events {
		keys[e.ID] = e.Key()
	}
	for _, e := range plan.MustNotApply {
		keys[e.ID] = e.Key()
	}
	key := func(id string) string {
		if k, ok := keys[id]; ok {
			return k
		}
		return " " + id
	}
	snap, err := service.Snapshot(ctx, c.pool, c.svc.spec, c.id, c.consumer, c.svc.obs.History(), key)
	if err != nil {
		return verdict{}, fmt.Errorf("service %s: %w", c.svc.spec.Name, err)
	}
	var v verdict
	v.inv, v.effects = Judge(plan, snap, c.consumer)
	return v, nil
}

// observe decodes the effects table every pollEvery until ctx ends, into
// the tally: each first effect counted at its commit time, its end-to-end
// latency from its event's intended time (events intended during the
// warm-up are not measured).
func (s *serviceRun) observe(ctx context.Context, t *tally, errs chan<- error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := s.poll(t); err != nil {
			errs <- err
			return
		}
	}
}

// pollEvery is how often a service cell reads its effects from the WAL.
const pollEvery = 200 * time.Millisecond

// poll reads once what committed since the last poll. It is never cut
// short (a query cancelled midway closes the slot's connection, and the
// rest of the history with it); it is bounded instead.
func (s *serviceRun) poll(t *tally) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	effects, err := s.obs.Poll(ctx)
	s.account(t, effects)
	if err != nil {
		s.failed.CompareAndSwap(nil, &err)
	}
	return err
}

func (s *serviceRun) account(t *tally, effects []service.Effect) {
	n := len(effects)
	if n == 0 {
		return
	}
	m := t.meters.get("service")
	warm := t.warmEnd.Load()
	for _, e := range effects {
		if lat, ok := s.intents.Latency(e); ok && e.Commit.Add(-lat).UnixNano() >= warm {
			m.recordE2E(lat)
		}
	}
	s.seen.Add(int64(n))
	t.effectsAt(int64(n), effects[0].Commit, effects[n-1].Commit)
}
