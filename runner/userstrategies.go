package runner

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/inbox/strategyfile"
)

// User strategies (Options.Extra): strategies that are not in the inbox
// registry, typically read from SQL files with inbox.LoadStrategyFile. Their
// cells run after the registered ones, through the same workload, brokers,
// oracle and checker, and are named by Strategy.Name()
// ("file:NAME.sql@HASH").

// cellStrategies lists the strategy names of the run's cells, in order.
func cellStrategies(o Options) []string {
	names := append([]string(nil), o.Strategies...)
	for _, s := range o.Extra {
		names = append(names, s.Name())
	}
	return names
}

// lookupStrategy finds a cell's strategy: an extra one by name first, so a
// user strategy is never silently replaced by a registered one.
func lookupStrategy(o Options, name string) (inbox.Strategy, error) {
	for _, s := range o.Extra {
		if s.Name() == name {
			return s, nil
		}
	}
	return inbox.Lookup(name)
}

// strategyPath is the file a user strategy came from, or its name.
func strategyPath(s inbox.Strategy) string {
	if p, ok := s.(interface{ Path() string }); ok {
		return p.Path()
	}
	return s.Name()
}

// validator is implemented by strategies that can check themselves
// against the server in a scratch schema (inbox.FileStrategy).
type validator interface {
	Validate(ctx context.Context, pool *pgxpool.Pool, scratchSchema string) error
}

// checkExtras refuses what the user strategies cannot run, and has the
// server check their SQL in scratch schemas, before any cell starts and so
// before any event is published. Errors about a strategy's SQL or its fit
// with the workload match strategyfile.ErrInvalid.
func checkExtras(ctx context.Context, o Options) error {
	if len(o.Extra) == 0 {
		return nil
	}
	seen := map[string]bool{}
	for _, n := range o.Strategies {
		seen[n] = true
	}
	for _, s := range o.Extra {
		if seen[s.Name()] {
			return &strategyfile.Error{Path: strategyPath(s), Msg: s.Name() + " is given twice"}
		}
		seen[s.Name()] = true
		// A file that does not declare idempotency keys cannot be judged
		// on a workload that reuses them: it is refused, not failed.
		keys := o.Spec != nil && o.Spec.Faults.IdempotencyConflicts > 0
		if !inbox.Handles(s, inbox.FeatureIdempotencyKeys) && keys {
			return &strategyfile.Error{Path: strategyPath(s), Msg: fmt.Sprintf("%s does not declare %s: true, and workload %s has faults.idempotency_conflicts: add the header line once the file handles client idempotency keys, or use a workload without them",
				s.Name(), inbox.FeatureIdempotencyKeys, o.Spec.Name)}
		}
	}
	pcfg, err := pgxpool.ParseConfig(o.Cfg.PGURL)
	if err != nil {
		return fmt.Errorf("postgres URL: %w", err)
	}
	pcfg.MaxConns = 2
	inbox.ConfigurePool(pcfg, inbox.DefaultOptions())
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	for _, s := range o.Extra {
		v, ok := s.(validator)
		if !ok {
			continue
		}
		if err := v.Validate(ctx, pool, cellID(o.RunID, "check", s.Name())); err != nil {
			return err
		}
	}
	return nil
}
