package inbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/inboxbench/inboxbench/envelope"
)

// Strategy applies events to the inbox core. Every correct strategy has the
// same semantics (the same Result for the same event in the same state);
// they differ in SQL and round trips. A runner uses them uniformly through
// ApplyBatch; single-event strategies loop.
type Strategy interface {
	// Name is the registry name ("tx", "cte", "batch", "pipeline",
	// "broken-…").
	Name() string
	// Description says in one line what the strategy's SQL does (or, for a
	// negative control, which mistake it reproduces).
	Description() string
	// Broken reports a negative control: never a default, never picked by
	// a wildcard, labelled in every listing.
	Broken() bool
	// ApplyBatch applies events under consumer. It always returns one
	// Outcome per event, in input order. Events with a Result were decided
	// (and their effects committed); an event with Outcome.Err was not
	// decided and must be redelivered. The error is non-nil when at least
	// one event has an Err, and joins their errors.
	ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error)
}

// AckOrdering is implemented by negative controls whose mistake lives in
// the consumer rather than in SQL: the runner must ack the delivery before
// calling ApplyBatch (broken-ack-before-commit).
type AckOrdering interface {
	AckBeforeCommit() bool
}

// BrokerDedupReliant is implemented by negative controls whose only
// deduplication is the broker's own (brokers.Capabilities.BrokerDedup):
// they apply on drivers that have it, and nowhere else.
type BrokerDedupReliant interface {
	ReliesOnBrokerDedup() bool
}

// ReliesOnBrokerDedup reports whether s deduplicates through the broker
// alone.
func ReliesOnBrokerDedup(s Strategy) bool {
	r, ok := s.(BrokerDedupReliant)
	return ok && r.ReliesOnBrokerDedup()
}

// Batching is implemented by strategies that apply many events in one
// call more cheaply than one by one (batch, pipeline): a runner hands them
// batches of up to the workload's batch size, and one event per call to
// every other strategy (as go-ycsb grants batches to a BatchDB).
type Batching interface {
	PrefersBatches() bool
}

// Scoped is implemented by strategies that handle only part of what a
// workload can send (a strategy file declares features in its header, and
// writes each consumer's own table only if its SQL names it): a scenario
// or workload that needs a feature a strategy lacks is not applicable to
// it. Built-in strategies handle everything.
type Scoped interface {
	// Lacks says why the strategy does not handle feature (a sentence
	// for the N/A row), "" when it does.
	Lacks(feature string) string
}

// Handles reports whether s handles feature: everything, unless it is
// Scoped.
func Handles(s Strategy, feature string) bool { return Lacks(s, feature) == "" }

// Lacks says why s does not handle feature, "" when it does.
func Lacks(s Strategy, feature string) string {
	if sc, ok := s.(Scoped); ok {
		return sc.Lacks(feature)
	}
	return ""
}

// ParkDrainer is implemented by strategies that apply parked events with
// their own SQL (strategy files).
type ParkDrainer interface {
	DrainParked(ctx context.Context, in *Inbox, consumer string) ([]Outcome, error)
}

// DrainParkedWith drains the consumer's parked events with s's own SQL
// when it has any, else with the built-in path (Inbox.DrainParked).
func DrainParkedWith(ctx context.Context, s Strategy, in *Inbox, consumer string) ([]Outcome, error) {
	if d, ok := s.(ParkDrainer); ok {
		return d.DrainParked(ctx, in, consumer)
	}
	return in.DrainParked(ctx, consumer)
}

// GroupExternal names the correct external strategies in Resolve.
const GroupExternal = "external"

// DefaultStrategy is the article's transaction.
const DefaultStrategy = "tx"

// brokenPrefix starts every negative control's name.
const brokenPrefix = "broken-"

var (
	registryMu sync.RWMutex
	registry   = map[string]Strategy{}
	// correctOrder lists the correct strategies in their documented order;
	// later registrations sort after them.
	correctOrder = []string{"tx", "cte", "batch", "pipeline"}
)

// Register adds s to the registry. It panics on a duplicate name, and on a
// name whose "broken-" prefix disagrees with Broken(), so a negative
// control can never be registered looking like a correct strategy.
func Register(s Strategy) {
	registryMu.Lock()
	defer registryMu.Unlock()
	name := s.Name()
	if name == "" || strings.ContainsAny(name, ", *") {
		panic(fmt.Sprintf("inbox: strategy name %q: want a non-empty name without commas, spaces or '*'", name))
	}
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("inbox: strategy %q registered twice", name))
	}
	if strings.HasPrefix(name, brokenPrefix) != s.Broken() {
		panic(fmt.Sprintf("inbox: strategy %q: negative controls, and only they, are named %s*", name, brokenPrefix))
	}
	registry[name] = s
}

// Strategies lists every registered strategy: the correct ones first in
// their documented order, then the negative controls by name.
func Strategies() []Strategy {
	registryMu.RLock()
	defer registryMu.RUnlock()
	rank := func(s Strategy) (int, string) {
		if s.Broken() {
			return 2, s.Name()
		}
		for i, n := range correctOrder {
			if n == s.Name() {
				return 0, fmt.Sprintf("%03d", i)
			}
		}
		return 1, s.Name()
	}
	out := make([]Strategy, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		gi, ki := rank(out[i])
		gj, kj := rank(out[j])
		if gi != gj {
			return gi < gj
		}
		return ki < kj
	})
	return out
}

// Names lists the registered names, each labelled as Label does.
func Names() []string {
	var out []string
	for _, s := range Strategies() {
		out = append(out, Label(s))
	}
	return out
}

// Label is the strategy's name as listings show it: negative controls are
// marked so no report can mistake one for a candidate.
func Label(s Strategy) string {
	if !s.Broken() {
		return s.Name()
	}
	if a, ok := s.(AckOrdering); ok && a.AckBeforeCommit() {
		return s.Name() + " (broken: negative control, consumer-level)"
	}
	return s.Name() + " (broken: negative control)"
}

// Lookup returns the strategy registered under name (exact match; a
// negative control is returned only when asked for by its full name).
func Lookup(name string) (Strategy, error) {
	registryMu.RLock()
	s, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("inbox: unknown strategy %q: accepted values are %s", name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Resolve turns a comma-separated list into strategies, in the order given,
// without repeats. "all", "correct" and "*" expand to the correct
// database-only strategies, "external" to the correct ones that call the
// external service (they need its settings and judge its call log); a
// negative control must be named in full.
func Resolve(spec string) ([]Strategy, error) {
	var out []Strategy
	seen := map[string]bool{}
	add := func(s Strategy) {
		if !seen[s.Name()] {
			seen[s.Name()] = true
			out = append(out, s)
		}
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
			continue
		case part == "all" || part == "correct" || part == "*" || part == GroupExternal:
			for _, s := range Strategies() {
				if !s.Broken() && CallsExternal(s) == (part == GroupExternal) {
					add(s)
				}
			}
		case strings.ContainsAny(part, "*?["):
			return nil, fmt.Errorf("inbox: strategy pattern %q: patterns are not accepted (negative controls must be named in full); use all, or names from: %s", part, strings.Join(Names(), ", "))
		default:
			s, err := Lookup(part)
			if err != nil {
				return nil, err
			}
			add(s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("inbox: no strategy in %q: accepted values are all, external, %s", spec, strings.Join(Names(), ", "))
	}
	return out, nil
}

// builtins are the built-in strategies, each with its registry name and
// the one line bench inbox strategies prints for it.
func builtins() []Strategy {
	return []Strategy{
		txStrategy{about{
			name:        "tx",
			description: "the article's transaction: INSERT inbox … ON CONFLICT DO NOTHING, then UPDATE account … WHERE version = v-1, one event per transaction",
		}},
		cteStrategy{about{
			name:        "cte",
			description: "one statement per event: a data-modifying CTE claims the inbox key, applies the conditional update and returns the outcome (autocommit, one round trip)",
		}},
		batchStrategy{about{
			name:        "batch",
			description: "N events per transaction: aggregates locked with one SELECT … ORDER BY id FOR UPDATE, one multi-row INSERT … ON CONFLICT … RETURNING for the inbox, one UPDATE … FROM unnest(…) for every account",
		}},
		pipelineStrategy{about{
			name:        "pipeline",
			description: "the cte statement for many events in one round trip (libpq pipeline mode), a sync point after each so every event is its own transaction",
		}},
		brokenSplit{about{
			name:        "broken-split",
			description: "inbox row in autocommit, business update in a second transaction that may roll back (split commit → inbox-without-effect)",
		}},
		brokenCheckThenInsert{about{
			name:        "broken-check-then-insert",
			description: "SELECT the inbox, then apply and INSERT … ON CONFLICT DO NOTHING ignoring the row count: the check, not the primary key, decides (races → duplicate-effect)",
		}},
		brokenGlobalKey{about{
			name:        "broken-global-key",
			description: "dedup key is the event id alone, shared by all consumers: a second consumer skips the event (lost-effect)",
		}},
		brokenAggregateKey{about{
			name:        "broken-aggregate-key",
			description: "dedup key is the aggregate id: the aggregate's later legitimate events are skipped (lost-effect)",
		}},
		brokenNoVersion{about{
			name:        "broken-no-version",
			description: "correct inbox, unconditional update ignoring versions: gaps and stale events are applied (version-gap, stale-applied)",
		}},
		brokenAckBeforeCommit{txStrategy{about{
			name:        "broken-ack-before-commit",
			description: "consumer-level: acks the delivery before the tx strategy commits; a crash in between loses the event (lost-effect). The runner implements the ack ordering",
		}}},
		brokenBrokerDedup{about{
			name:        "broken-broker-dedup",
			description: "no inbox claim: trusts the broker's own deduplication by message id (JetStream's Nats-Msg-Id window) and applies every delivery without a version guard; a republish after the window or a redelivery applies twice (duplicate-effect). Only on a driver with broker-side deduplication",
		}},
		brokenTTLDedup{about{
			name:        "broken-ttl-dedup",
			description: "dedup marker that expires after 100ms (a TTL cache); the version check alone stops a later redelivery, as STALE (dedup-miss)",
		}},
		extKey{about: about{
			name:        "ext-key",
			description: "external call with an idempotency key = the event identity, before the commit: claim and change as tx, call, commit after the call answered; a redelivery calls again with the same key and gets the stored result",
			step:        "in the transaction, before the commit, key = event identity",
		}},
		extLease{about: about{
			name:        "ext-lease",
			description: "durable PROCESSING state with a lease: claim and commit, call with the key outside any transaction, record DONE with the inbox row and the change; an expired lease is taken over by querying the result by key first; an operation taken over too often is STUCK and reported",
			step:        "between two transactions, under a lease, key = event identity",
		}},
		extOutbox{about{
			name:        "ext-outbox",
			description: "transactional outbox: the request is written in the inbox transaction with its key; a relay sends it at least once and marks it sent, the service deduplicates",
			step:        "after the commit, by a relay reading the outbox, key = event identity",
		}},
		extKey{about: about{
			name:        "broken-ext-new-key",
			description: "ext-key retrying under a new request id each attempt: a call that timed out after it was applied, or a handler that died before its commit, is paid again (external-duplicate)",
			step:        "in the transaction, before the commit, a new key per attempt",
		}, newKeyEachAttempt: true},
		extLease{about: about{
			name:        "broken-ext-exists",
			description: "ext-lease taking an existing operation row for success: a PROCESSING operation whose holder died or failed is acked as DUPLICATE and never finished (processing-stuck)",
			step:        "between two transactions, under a lease, key = event identity",
		}, existsMeansDone: true},
		brokenExtAfterCommit{about{
			name:        "broken-ext-after-commit",
			description: "commits, then calls without an idempotency key and retries a few times: a timed-out call is paid twice (external-duplicate), one refused for longer is never paid (external-lost)",
			step:        "after the commit, without a key",
		}},
	}
}

func init() {
	for _, s := range builtins() {
		Register(s)
	}
}

// about is what a built-in strategy says of itself: embedded in each, it
// gives Strategy's Name, Description and Broken and Externals'
// ExternalStep, so that the strategy's own type holds only what it does.
type about struct {
	name, description string
	// step says when an external strategy calls the service; "" for the
	// database-only ones.
	step string
}

// Name implements Strategy.
func (a about) Name() string { return a.name }

// Description implements Strategy.
func (a about) Description() string { return a.description }

// Broken implements Strategy: the negative controls are named broken-*.
func (a about) Broken() bool { return strings.HasPrefix(a.name, brokenPrefix) }

// ExternalStep implements Externals.
func (a about) ExternalStep() string { return a.step }

// perEvent runs f for each event and collects outcomes.
func perEvent(events []*envelope.Event, f func(ev *envelope.Event) Outcome) ([]Outcome, error) {
	outs := make([]Outcome, len(events))
	for i, ev := range events {
		outs[i] = f(ev)
	}
	return outs, joinOutcomeErrors(outs)
}

// txStrategy is the article's transaction.
type txStrategy struct{ about }

// ApplyBatch implements Strategy. Its errors name "tx" even in
// broken-ack-before-commit, whose mistake is in the consumer and whose
// transaction is this one.
func (txStrategy) ApplyBatch(ctx context.Context, in *Inbox, consumer string, events []*envelope.Event) ([]Outcome, error) {
	a := applier{in, "tx", consumer}
	return perEvent(events, func(ev *envelope.Event) Outcome {
		return a.applyOne(ctx, ev, in.defaultApplyOpts())
	})
}
