package dbcalib

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
	"github.com/inboxbench/inboxbench/workload"
)

// The bare pgx loop sends a twin's statements from this process through
// pgx, the driver every cell uses, and does nothing else: no broker, no
// envelope, no handler, no bookkeeping, no histograms. Each of Clients
// goroutines holds one connection and applies its own aggregates' events,
// computed as the pgbench script computes them, in the strategy's
// transactions and round trips (inbox.Statement, pgx's statement cache,
// the batch's first three statements in one pipeline). It splits the gap
// between pgbench and a none cell in two: what Go and pgx cost against
// libpq (pgx loop / pgbench), and what the harness costs on top of its
// driver (none / pgx loop).

// pgxAppName is the application_name of the loop's connections.
const pgxAppName = "inboxbench-pgx"

// LoopRun is one measurement of the bare pgx loop.
type LoopRun struct {
	EventsPerS float64
	// CPU is the loop's CPU per event, when the server runs on this host.
	CPU *CPU
}

// loopEvent is event number idx of client c, as the twin computes it.
type loopEvent struct {
	agg, id                   string
	version, previous, amount int64
	time                      time.Time
}

func (s Shape) loopEvent(c, idx int) loopEvent {
	per := s.perClient()
	v := int64(idx/per + 1)
	agg := workload.AggregateID(c + s.Clients*(idx%per))
	return loopEvent{agg: agg, id: workload.EventID(agg, v), version: v, previous: v - 1,
		amount: int64(1 + (idx*7919)%100), time: time.UnixMilli(int64(idx)).UTC()}
}

// RunLoop runs s's twin from the bare pgx loop against at's server for
// warm-up plus measure and measures its rate after the warm-up. The
// schema must be prepared (Prepare) and is left as the loop leaves it,
// for Verify.
func RunLoop(ctx context.Context, s Shape, at Target) (LoopRun, error) {
	if err := s.check(); err != nil {
		return LoopRun{}, err
	}
	cfg, err := pgxpool.ParseConfig(at.PGURL)
	if err != nil {
		return LoopRun{}, fmt.Errorf("postgres URL: %w", err)
	}
	cfg.MaxConns = int32(s.Clients)
	cfg.ConnConfig.RuntimeParams["application_name"] = pgxAppName
	inbox.ConfigurePool(cfg, inbox.DefaultOptions()) // the timeouts a cell's connections carry
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return LoopRun{}, fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	l := &loop{Shape: s, pool: pool}
	st := func(name string) string { q, _ := inbox.Statement(s.Schema, name); return q } // Prepare validated the schema
	l.claim, l.create, l.update, l.exists = st("inbox-claim"), st("account-create-v1"), st("account-update"), st("parked-exists")
	if s.Parking {
		l.claim = st("inbox-claim-guarded")
	}
	l.lock, l.parked, l.insert, l.updateBatch = st("batch-lock"), st("batch-parked"), st("batch-inbox-insert"), st("batch-update")
	t, _ := twinOf(s.Strategy) // check found it
	var stop func(time.Duration) (CPU, error)
	if at.Local != nil {
		sm := &sampler{pool: at.Local, client: selfCPU, side: func(context.Context) (string, string, error) { return s.Schema, pgxAppName, nil }}
		stop = sm.start(ctx)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var done atomic.Int64
	var wg sync.WaitGroup
	for c := range s.Clients {
		wg.Go(func() {
			for n := 0; lctx.Err() == nil; n++ {
				if err := t.apply(l, lctx, c, n); err != nil {
					cancel(fmt.Errorf("pgx loop (twin of %s), client %d: %w", s.Strategy, c, err))
					return
				}
				done.Add(int64(s.EventsPerTx()))
			}
		})
	}
	var run LoopRun
	if ctxtime.Sleep(lctx, at.Warmup) {
		from, start := done.Load(), time.Now()
		if ctxtime.Sleep(lctx, at.Measure) {
			run.EventsPerS = float64(done.Load()-from) / time.Since(start).Seconds()
		}
	}
	cancel(nil)
	wg.Wait()
	if stop != nil {
		if c, cerr := stop(at.Warmup); cerr == nil {
			run.CPU = &c
		}
	}
	switch err := context.Cause(lctx); {
	case run.EventsPerS > 0:
		return run, nil
	case err != nil && !errors.Is(err, context.Canceled):
		return run, err
	case ctx.Err() != nil:
		return run, ctx.Err()
	default:
		return run, fmt.Errorf("pgx loop (twin of %s): no transaction completed in the %s measured", s.Strategy, at.Measure)
	}
}

// loop is the bare loop of one shape: its pool and the twin's statements.
type loop struct {
	Shape
	pool                              *pgxpool.Pool
	claim, create, update, exists     string
	lock, parked, insert, updateBatch string
}

// tx applies client c's n-th event as the tx strategy does: the claim
// (guarded when parking), the update (the creating upsert at version 1),
// the drain check when parking, each a round trip, in one transaction.
func (l *loop) tx(ctx context.Context, c, n int) error {
	e := l.loopEvent(c, n)
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if l.Parking {
		var parked, claimed bool
		err = tx.QueryRow(ctx, l.claim, l.Consumer, workload.Source, e.id, e.agg, e.version, e.time).Scan(&parked, &claimed)
	} else {
		_, err = tx.Exec(ctx, l.claim, l.Consumer, workload.Source, e.id, e.agg, e.version, e.time)
	}
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	if e.version == 1 {
		_, err = tx.Exec(ctx, l.create, e.agg, e.amount)
	} else {
		_, err = tx.Exec(ctx, l.update, e.agg, e.amount, e.version)
	}
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if l.Parking {
		var exists bool
		if err := tx.QueryRow(ctx, l.exists, l.Consumer, e.agg).Scan(&exists); err != nil {
			return fmt.Errorf("drain check: %w", err)
		}
	}
	return tx.Commit(ctx)
}

// batch applies client c's n-th batch as the batch strategy does: the
// locks, the parked rows and the inbox claims in one pipeline, then the
// one UPDATE, in one transaction.
func (l *loop) batch(ctx context.Context, c, n int) error {
	b := l.BatchSize
	aggs, ids, sources := make([]string, b), make([]string, b), make([]string, b)
	versions, previous, amounts, times := make([]int64, b), make([]int64, b), make([]int64, b), make([]*time.Time, b)
	for k := range b {
		e := l.loopEvent(c, n*b+k)
		aggs[k], ids[k], sources[k] = e.agg, e.id, workload.Source
		versions[k], previous[k], amounts[k], times[k] = e.version, e.previous, e.amount, &e.time
	}
	locks := slices.Clone(aggs)
	slices.Sort(locks)
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	batch := &pgx.Batch{}
	batch.Queue(l.lock, locks)
	if l.Parking {
		batch.Queue(l.parked, l.Consumer, locks)
	}
	batch.Queue(l.insert, l.Consumer, sources, ids, aggs, versions, times)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("locks and claims: %w", err)
	}
	if _, err := tx.Exec(ctx, l.updateBatch, aggs, amounts, previous, versions); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return tx.Commit(ctx)
}
