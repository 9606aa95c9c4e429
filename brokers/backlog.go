package brokers

import (
	"context"
	"time"
)

// The crash-with-backlog fault: a consumer dies with a known number of
// deliveries it received and did not handle. The driver suite
// (brokertest) and the runner (conform's crash-with-backlog scenario)
// both hold their Handler with HoldForBacklog before the Crash, so a
// driver is held to the same fault by both. A correct driver redelivers
// everything the dead consumer held; one that settled any of it on
// receipt (SettleOnReceipt, or a bug of that kind) loses exactly that.

const (
	// BacklogMinHold is the least a held Handler call waits before it
	// dies: longer than a driver takes to settle in the background what
	// it settles (Kafka commits every 200 ms, RocketMQ every second), so
	// a driver that settles on receipt has done so when the consumer
	// dies, and a kill -9 does not race an acknowledgement still on its
	// way out of the socket.
	BacklogMinHold = 2 * time.Second
	// BacklogMaxHold bounds the wait for a backlog that never builds (a
	// stream that ended).
	BacklogMaxHold = 30 * time.Second
)

// Backlog is what a subscription held when HoldForBacklog let its
// Handler call die.
type Backlog struct {
	// Held counts the deliveries the subscription had received and not
	// settled (Stats.Outstanding), Batch of them in the held call's
	// hands; Want is the backlog waited for, and Reached reports
	// Held ≥ Want.
	Held, Batch, Want int64
	Reached           bool
}

// HoldForBacklog holds a Handler call whose batch of n deliveries is to
// die unhandled (nothing committed, nothing acknowledged) until its
// subscription holds more than that batch: the batch and up to another
// full batch the broker handed it meanwhile, as far as one shard's
// Prefetch allows (opts are the subscription's options). stats reads the
// subscription's Stats (zeros until Subscribe returned are fine: it
// polls). The call waits at least BacklogMinHold whatever ctx does — a
// shard revoked meanwhile ends ctx, and the consumer is to die all the
// same — and at most BacklogMaxHold; past BacklogMinHold, ctx's end stops
// the wait too. The caller then dies: a Crash verdict, or kill -9.
func HoldForBacklog(ctx context.Context, stats func() Stats, n int, opts SubscribeOptions) Backlog {
	opts = opts.WithDefaults()
	b := Backlog{Batch: int64(n), Want: int64(n + max(1, min(opts.MaxBatch, opts.Prefetch-n)))}
	start := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		b.Held = stats().Outstanding()
		b.Reached = b.Held >= b.Want
		waited := time.Since(start)
		if waited >= BacklogMaxHold || waited >= BacklogMinHold && (b.Reached || ctx.Err() != nil) {
			return b
		}
		<-t.C
	}
}
