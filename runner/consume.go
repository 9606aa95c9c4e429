package runner

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/workload"
)

// ConsumeOptions run the suite's own consumer as a service under test
// (`bench consume`): what a service cell hands each instance of a
// service (docs/services.md), so the outside view of the suite judges
// known code too.
type ConsumeOptions struct {
	Cfg config.Config
	// Broker, Topic and Group are where to consume; Schema and Consumer
	// where to apply, the inbox's schema and its consumer name.
	Broker, Topic, Group, Schema, Consumer string
	// Shards is the topic's shard count; Consumers how many
	// subscriptions this process runs; Strategy the inbox strategy
	// (registered name); BatchSize its batch for a batching strategy.
	Shards, Consumers, BatchSize int
	Strategy                     string
	Console                      Console
	// Ready is called once every subscription started.
	Ready func()
}

// Consume migrates the schema (once, whichever instance comes first) and
// consumes with the suite's handler until ctx ends or a consumer fails.
func Consume(ctx context.Context, o ConsumeOptions) error {
	st, err := inbox.Lookup(o.Strategy)
	if err != nil {
		return err
	}
	spec := workload.Defaults()
	spec.Shards, spec.Consumers, spec.BatchSize = o.Shards, max(1, o.Consumers), max(1, o.BatchSize)
	opts := Options{Cfg: o.Cfg, Spec: &spec, Console: o.Console}
	c := &cell{o: &opts, broker: o.Broker, name: st.Name(), strategy: st, id: o.Schema, consumer: o.Consumer,
		t: newTally(false, DefaultRetryBound, 0), notes: &notes{}}
	if c.topic() != o.Topic || c.group() != o.Group {
		return fmt.Errorf("topic %q and group %q are not the ones schema %s has (%s, %s): bench consume follows the suite's names", o.Topic, o.Group, o.Schema, c.topic(), c.group())
	}
	if err := c.openInbox(ctx, false, nil); err != nil {
		return err
	}
	defer c.pool.Close()
	if err := migrateOnce(ctx, c); err != nil {
		return err
	}
	if c.b, err = brokers.Open(ctx, c.broker, c.o.Cfg, nil); err != nil {
		return fmt.Errorf("%s: %w", c.broker, err)
	}
	defer c.b.Close()
	if err := c.b.Setup(ctx, c.topic(), spec.Shards); err != nil {
		return fmt.Errorf("%s: set up topic %s: %w", c.broker, c.topic(), err)
	}
	cons := newLocalConsumers(c, spec.Consumers, newHandler(c, &inProcess{}))
	if err := cons.start(ctx); err != nil {
		return err
	}
	if o.Ready != nil {
		o.Ready()
	}
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-cons.failed():
	}
	_ = cons.stop(ctx)
	return failed
}

// migrateOnce migrates the cell's schema under an advisory lock: the
// instances of a service start together.
func migrateOnce(ctx context.Context, c *cell) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Release()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", c.id); err != nil {
			return err
		}
		if _, err := inbox.MigrateLayout(ctx, tx, c.id, inbox.Layout{}); err != nil {
			return fmt.Errorf("postgres: migrate schema %s: %w", c.id, err)
		}
		return nil
	})
}
