// Package conform judges: it runs named scenarios — the article's four
// experiments and the faults that happen in production — on every broker ×
// strategy, compares each outcome with what is declared in code, and
// reports the matrix with the mutation score (negative controls caught /
// negative controls run). A negative control that passes is a failure of
// the suite, not a success of the control. A scenario that tests what a
// strategy lacks (inbox.Lacks: a feature a strategy file does not declare,
// or its own table per consumer), or needs what a broker cannot do (its
// capabilities), is N/A with the reason, never FAIL or ERROR.
package conform

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
	"github.com/inboxbench/inboxbench/service"
)

// Env is what scenarios run against.
type Env struct {
	Cfg config.Config
	// StackDir is the local stack's directory (broker-restart restarts
	// brokers through it).
	StackDir string
	Log      *slog.Logger
	// Out receives the scenarios' printed lines (the article's).
	Out io.Writer
	// WorkerCmd starts a `bench worker` process (consumer-crash kills
	// real ones): the bench executable and "worker".
	WorkerCmd []string
}

// Outcome is what one scenario run on one broker with one strategy found.
type Outcome struct {
	Verdict   results.Verdict // PASS or FAIL (ERROR when Err is set)
	Anomalies map[string]int64
	Examples  map[string][]string
	// Line is the scenario's one-line account, e.g. the article's
	// "duplicate: redelivered=true duplicateSkipped=true balance=10 inbox=1".
	Line  string
	Notes []string
	Err   error
	// Faults are the faults the scenario's cell injected, with their
	// outage; Control names the weak setting it ran under.
	Faults   []results.Fault
	Timeline *results.Timeline
	Control  string
	// crashes counts the crash faults that fired (processes killed in
	// worker mode).
	crashes int64
}

// Cell is one run of a scenario: the environment it runs against, the
// scenario's name, and the broker and subject of its row: a strategy of
// the suite's own consumer, or a team's service under test.
type Cell struct {
	Env      *Env
	Scenario string
	Broker   string
	Strategy inbox.Strategy // nil for a service's row
	Service  *service.Spec  // nil for a strategy's row
}

// Name is the row's subject as the matrix names it: the strategy's name,
// or "service:NAME".
func (c Cell) Name() string {
	if c.Service != nil {
		return c.Service.Label()
	}
	return c.Strategy.Name()
}

// Broken reports a negative control: a broken-* strategy, or a service
// that declares a mistake.
func (c Cell) Broken() bool {
	if c.Service != nil {
		return c.Service.Mistake != ""
	}
	return c.Strategy.Broken()
}

// control is the negative control the row stands for, as scenarios'
// Catches name it ("" for a correct subject): a transport control names
// its kind (runner.EarlySettle), whichever strategy runs under it.
func (c Cell) control() string {
	switch {
	case !c.Broken():
		return ""
	case c.Service != nil:
		return c.Service.Control()
	}
	if k, ok := c.Strategy.(interface{ Control() string }); ok {
		return k.Control()
	}
	return c.Strategy.Name()
}

// targeted reports a negative control that sc is designed to catch.
func (c Cell) targeted(sc *Scenario) bool {
	k := c.control()
	return k != "" && (slices.Contains(sc.Catches, k) || c.Service != nil && slices.Contains(sc.CatchesOutside, k))
}

// Scenario is a named, deterministic program of publishes, deliveries and
// faults with its own expected final state.
type Scenario struct {
	Name string
	// Proves says in one line what a PASS shows.
	Proves string
	// Timeout bounds one run of the scenario.
	Timeout time.Duration
	// Catches lists the negative controls the scenario is designed to
	// catch: for them FAIL is expected; they do not run elsewhere.
	Catches []string
	// Covers lists negative controls whose mistake the scenario's fault
	// does not reach: they run here too and must PASS, which shows what
	// their mechanism does cover (a broker's deduplication window covers
	// a producer's quick retry, publisher-retry).
	Covers []string
	// Needs, when set, says why the scenario cannot run on a driver with
	// these capabilities ("" when it can): e.g. it needs a broker outside
	// this process. Such rows are N/A with that reason.
	Needs func(brokers.Capabilities) string
	// Requires lists the features a strategy must handle (inbox.Lacks)
	// for the scenario to apply; others get N/A with the strategy's
	// reason.
	Requires []string
	// External marks a scenario of effects beyond the database: it runs
	// the strategies that call the external service (inbox.CallsExternal)
	// and judges the service's call log; the others run every other
	// scenario. A strategy is run only in the scenarios of its kind.
	External bool
	// Where, when set, says why the scenario cannot run against this
	// stack for this broker ("" when it can): the failover scenarios need
	// the replicated topology. Such rows are N/A with that reason.
	Where func(e *Env, broker string) string
	// MustShow, when set, makes the scenario a control run under a weak
	// setting: every strategy is expected to FAIL, naming this anomaly.
	MustShow string
	// Exclusive scenarios run alone, never beside another cell: they
	// disturb what every cell shares (PostgreSQL failing over, the
	// machine's cores while a cluster recovers).
	Exclusive bool
	// Outside says why the scenario cannot be applied to a service under
	// test from outside ("" when it can: every stream of the runner can).
	// OutsideOnly scenarios apply to services alone: their faults hit
	// processes and connections that only a service's instances have.
	// CatchesOutside are negative controls the scenario catches in a
	// service's form only (a mistake whose service variant it exposes).
	Outside        string
	OutsideOnly    bool
	CatchesOutside []string
	Run            func(ctx context.Context, c Cell) Outcome
}

var registry []*Scenario

func register(s *Scenario) {
	for _, o := range registry {
		if o.Name == s.Name {
			panic("conform: scenario " + s.Name + " registered twice")
		}
	}
	registry = append(registry, s)
}

// Scenarios lists every scenario in the order they run.
func Scenarios() []*Scenario { return registry }

// Select returns the named scenarios (all when names is empty), in the
// order given, each once; a name may be a pattern ("external-*", as
// path.Match reads it) that matches one or more.
func Select(names []string) ([]*Scenario, error) {
	if len(names) == 0 {
		return registry, nil
	}
	var out []*Scenario
	for _, n := range names {
		n = strings.TrimSpace(n)
		var found []*Scenario
		for _, s := range registry {
			if ok, err := path.Match(n, s.Name); err != nil {
				return nil, fmt.Errorf("scenario pattern %q: %v", n, err)
			} else if ok {
				found = append(found, s)
			}
		}
		if len(found) == 0 {
			var all []string
			for _, s := range registry {
				all = append(all, s.Name)
			}
			return nil, fmt.Errorf("unknown scenario %q: choose from %s (bench conform --list explains each)", n, strings.Join(all, ", "))
		}
		for _, s := range found {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// Options of one conformance run.
type Options struct {
	Env        Env
	Scenarios  []*Scenario
	Brokers    []string
	Strategies []inbox.Strategy
	// Services are teams' services under test, each a subject beside
	// the strategies.
	Services []*service.Spec
	// Progress receives one line per cell as it finishes.
	Progress io.Writer
}

// Run executes the matrix. Broken strategies run only in the scenarios
// that target them; correct ones run everywhere. Each broker's cells run
// one at a time, brokers side by side: a verdict does not depend on
// speed, and RocketMQ's failover waits would otherwise dominate.
func Run(ctx context.Context, o Options) []results.ConformRow {
	var (
		mu   sync.Mutex
		rows []results.ConformRow
		wg   sync.WaitGroup
	)
	for _, b := range o.Brokers {
		wg.Add(1)
		go func(b string) {
			defer wg.Done()
			bc := caps(o.Env.Cfg, b) // opens the driver: once per broker
			for _, sc := range o.Scenarios {
				for _, c := range o.cells(b, sc, bc) {
					if ctx.Err() != nil {
						return
					}
					var row results.ConformRow
					if why := notApplicable(c, sc, bc); why != "" {
						row = results.ConformRow{Scenario: sc.Name, Broker: b, Strategy: c.Name(), Broken: c.Broken(),
							Expected: results.VerdictNA, Verdict: results.VerdictNA, Reason: why}
					} else {
						row = runOne(ctx, sc, c)
					}
					mu.Lock()
					rows = append(rows, row)
					o.progress(row)
					mu.Unlock()
				}
			}
		}(b)
	}
	wg.Wait()
	// Report order: scenario, then broker and strategy as given.
	pos := func(list []string, v string) int { return slices.Index(list, v) }
	scn := make([]string, len(o.Scenarios))
	for i, s := range o.Scenarios {
		scn[i] = s.Name
	}
	var stn []string
	for _, s := range o.Strategies {
		stn = append(stn, s.Name())
	}
	for _, s := range o.Services {
		stn = append(stn, s.Label())
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if x, y := pos(scn, a.Scenario), pos(scn, b.Scenario); x != y {
			return x < y
		}
		if x, y := pos(o.Brokers, a.Broker), pos(o.Brokers, b.Broker); x != y {
			return x < y
		}
		return pos(stn, a.Strategy) < pos(stn, b.Strategy)
	})
	return rows
}

// cells are the rows of scenario sc on broker b (with capabilities bc):
// every strategy and service the scenario judges. A built-in negative
// control, and a service's mistake, run where they are targeted (the
// matrix stays small enough for 20 minutes on 2 cores); a user's file
// marked broken runs everywhere, since no scenario declares it. A
// transport control runs only on a broker with a transport (not the
// baseline). A strategy runs only in the scenarios of its kind (external
// or database-only).
func (o *Options) cells(b string, sc *Scenario, bc brokers.Capabilities) []Cell {
	var out []Cell
	for _, st := range o.Strategies {
		c := Cell{Env: &o.Env, Scenario: sc.Name, Broker: b, Strategy: st}
		if st.Broken() && !c.targeted(sc) && !slices.Contains(sc.Covers, st.Name()) && (isRegistered(st) || isTransportControl(st)) {
			continue
		}
		if isTransportControl(st) && bc.Baseline {
			continue
		}
		if inbox.CallsExternal(st) != sc.External {
			continue // a scenario of the other kind: nothing of it to judge
		}
		out = append(out, c)
	}
	for _, sp := range o.Services {
		c := Cell{Env: &o.Env, Scenario: sc.Name, Broker: b, Service: sp}
		if c.Broken() && !c.targeted(sc) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// progress prints a finished row.
func (o *Options) progress(row results.ConformRow) {
	if o.Progress == nil {
		return
	}
	mark := "as expected"
	if !row.AsExpected() {
		mark = "NOT AS EXPECTED"
	}
	fmt.Fprintf(o.Progress, "%-22s %-15s %-26s %-5s expected %-4s %5.1fs  %s%s\n", row.Scenario, row.Broker, row.Strategy, row.Verdict,
		row.Expected, row.DurationS, mark, anomalySuffix(row))
}

// runOne runs cell c of scenario sc, bounded by its timeout and alone
// when it is Exclusive, into its row.
func runOne(ctx context.Context, sc *Scenario, c Cell) (row results.ConformRow) {
	row = results.ConformRow{Scenario: sc.Name, Broker: c.Broker, Strategy: c.Name(), Broken: c.Broken(), Expected: results.VerdictPass}
	if c.targeted(sc) {
		row.Expected = results.VerdictFail
	}
	if sc.MustShow != "" {
		row.Expected, row.MustShow = results.VerdictFail, sc.MustShow
	}
	if sc.Exclusive {
		exclusive.Lock()
		defer exclusive.Unlock()
	} else {
		exclusive.RLock()
		defer exclusive.RUnlock()
	}
	ctx, cancel := context.WithTimeout(ctx, sc.Timeout)
	defer cancel()
	start := time.Now()
	defer func() {
		row.DurationS = time.Since(start).Seconds()
		if r := recover(); r != nil {
			row.Verdict, row.Error = results.VerdictError, fmt.Sprintf("panic: %v", r)
		}
	}()
	out := sc.Run(ctx, c)
	row.Verdict, row.Anomalies, row.Examples, row.Line, row.Notes = out.Verdict, out.Anomalies, out.Examples, out.Line, out.Notes
	row.Faults, row.Timeline, row.Control = out.Faults, out.Timeline, out.Control
	if out.Err != nil {
		row.Verdict = results.VerdictError
		row.Error = out.Err.Error()
		if ctx.Err() != nil {
			row.Error = fmt.Sprintf("timed out after %s: %v", sc.Timeout, out.Err)
		}
		// A client library may quote its endpoint, credentials and all.
		row.Error = c.Env.Cfg.RedactSecrets(row.Error)
	}
	if row.Line != "" && c.Env.Out != nil {
		fmt.Fprintln(c.Env.Out, row.Line)
	}
	return row
}

// exclusive lets an Exclusive scenario's cell run alone: the others hold
// it shared.
var exclusive sync.RWMutex

func anomalySuffix(r results.ConformRow) string {
	if r.Error != "" {
		return "  error: " + r.Error
	}
	var names []string
	for n, v := range r.Anomalies {
		if v > 0 {
			names = append(names, fmt.Sprintf("%s=%d", n, v))
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return "  " + strings.Join(names, " ")
}

// verdict turns anomaly counts into PASS/FAIL.
func verdict(anomalies map[string]int64) results.Verdict {
	for _, v := range anomalies {
		if v > 0 {
			return results.VerdictFail
		}
	}
	return results.VerdictPass
}

// caps are a driver's capabilities (opening a driver needs no server).
func caps(cfg config.Config, broker string) brokers.Capabilities {
	b, err := brokers.Open(context.Background(), broker, cfg, nil)
	if err != nil {
		return brokers.Capabilities{}
	}
	defer b.Close()
	return b.Capabilities()
}

// notApplicable says why scenario sc does not apply to cell c's broker
// (with capabilities bc) and strategy or service, or "" when it does.
func notApplicable(c Cell, sc *Scenario, bc brokers.Capabilities) string {
	if why := outsideApplies(c, sc, bc); why != "" {
		return why
	}
	if sc.Where != nil {
		if why := sc.Where(c.Env, c.Broker); why != "" {
			return why
		}
	}
	if sc.Needs != nil {
		if why := sc.Needs(bc); why != "" {
			return c.Broker + " " + why
		}
	}
	if c.Strategy != nil && inbox.ReliesOnBrokerDedup(c.Strategy) && bc.BrokerDedup == 0 {
		return c.Broker + " has no broker-side deduplication (Capabilities.BrokerDedup), the only one " + c.Strategy.Name() + " relies on"
	}
	for _, f := range sc.Requires {
		if c.Service != nil && !c.Service.Handles(f) {
			return fmt.Sprintf("%s tests %s, which the service's spec does not list among its features", sc.Name, f)
		}
		if why := inbox.Lacks(c.Strategy, f); c.Service == nil && why != "" {
			return fmt.Sprintf("%s tests %s: %s", sc.Name, f, why)
		}
	}
	return ""
}

// outsideApplies says why sc cannot run on c as a service under test, or
// as the suite's own consumer when only a service can take it.
func outsideApplies(c Cell, sc *Scenario, bc brokers.Capabilities) string {
	if c.Service == nil {
		if sc.OutsideOnly {
			return "needs a consumer outside bench, a service under test (--service): its faults hit the instances' processes and their broker connections through the suite's proxy"
		}
		return ""
	}
	switch ok, why := c.Service.Speaks(c.Broker); {
	case sc.External:
		return "judges the external service's call log, which only the suite's ext-* strategies call"
	case sc.Outside != "":
		return sc.Outside
	case !ok:
		return why
	case bc.InProcess:
		return c.Broker + " lives inside bench: no service outside it can consume it"
	}
	return ""
}

// outOfProcess accepts drivers whose broker is another process: one that
// worker processes can share, and the stack can restart.
func outOfProcess(c brokers.Capabilities) string {
	if c.InProcess {
		return "lives inside this process: no worker process can consume it and the stack cannot restart it"
	}
	return ""
}

func isRegistered(st inbox.Strategy) bool {
	r, err := inbox.Lookup(st.Name())
	return err == nil && r == st
}

// TransportControls are the transport's negative controls conform runs
// beside the broken-* strategies: tx and batch, one delivery and a batch
// per handler call, each with a driver that settles on receipt
// (runner.EarlySettle). They run where a scenario declares them, on the
// brokers with a transport.
func TransportControls() []inbox.Strategy {
	var out []inbox.Strategy
	for _, n := range []string{"tx", "batch"} {
		if st, err := inbox.Lookup(n); err == nil {
			out = append(out, runner.SettlingEarly(st))
		}
	}
	return out
}

// isTransportControl reports one of TransportControls.
func isTransportControl(st inbox.Strategy) bool {
	k, ok := st.(interface{ Control() string })
	return ok && k.Control() == runner.EarlySettle
}
