package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// An inbox at production size: the workload's inbox_prefill loads history
// into the cell's inbox before the stream (outside the cell's figures),
// and inbox_prune_every runs retention beside the stream, so the cost of
// a big inbox and of cleaning it up are measured with the strategy.

// pruneBatch is the rows one retention transaction deletes on a plain
// inbox (bench inbox prune's default).
const pruneBatch = 5000

// prefill loads the workload's history into the cell's inbox.
func (c *cell) prefill(ctx context.Context) error {
	s := c.o.Spec
	if s.InboxPrefill <= 0 {
		return nil
	}
	start := time.Now()
	last := start
	p := inbox.Prefill{Rows: int64(s.InboxPrefill), Age: s.InboxPrefillAge.D(), Aggregates: s.Aggregates,
		Consumer: c.consumer, Source: workload.Source, AppliedBefore: start, EventTimeBefore: firstEventTime(c.plan),
		Progress: func(n int64) {
			if time.Since(last) >= 5*time.Second || n == int64(s.InboxPrefill) {
				last = time.Now()
				fmt.Fprintf(c.o.Console.Progress, "%s/%s: prefilling the inbox: %s of %s rows (%s)\n", c.broker, c.strategy.Name(),
					results.FormatRate(float64(n)), results.FormatRate(float64(s.InboxPrefill)), time.Since(start).Round(time.Second))
			}
		}}
	if err := p.Load(ctx, c.pool, c.id); err != nil {
		return err
	}
	c.notes.add(fmt.Sprintf("inbox prefilled with %d rows spanning %s before the run, in %s (not in the figures)",
		s.InboxPrefill, days(s.InboxPrefillAge.D()), time.Since(start).Round(time.Second)))
	return nil
}

// days writes whole days as 30d, anything else as Go does.
func days(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// firstEventTime is the earliest event time of the plan: prefilled history
// ends there, so retention by event time can keep the run's own events.
func firstEventTime(plan *workload.Plan) time.Time {
	var first time.Time
	for _, e := range plan.Events {
		if !e.Time.IsZero() && (first.IsZero() || e.Time.Before(first)) {
			first = e.Time
		}
	}
	if first.IsZero() {
		return time.Now()
	}
	return first
}

// retention runs the workload's retention beside the stream.
type retention struct {
	passes, rows, dropped int64
	busy                  time.Duration
	err                   error
}

// pruneDuring runs retention every inbox_prune_every until stop is called,
// each pass after the previous one ended, and notes what it did. On a
// partitioned inbox retention counts from the event's time, so the bound
// is taken from the run's first event: it keeps inbox_prune_keep of the
// history before the run, and the run's own events.
func (c *cell) pruneDuring(ctx context.Context) (stop func()) {
	every, keep := c.o.Spec.InboxPruneEvery.D(), c.o.Spec.InboxPruneKeep.D()
	if every <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var r retention
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		first := firstEventTime(c.plan)
		t := time.NewTicker(every)
		defer t.Stop()
		for r.err == nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			olderThan := keep
			if c.o.Inbox.Partitioned {
				olderThan += time.Since(first)
			}
			start := time.Now()
			res, err := inbox.ApplyRetention(ctx, c.pool, c.id, olderThan, pruneBatch)
			r.passes++
			r.busy += time.Since(start)
			r.rows += res.Rows
			r.dropped += int64(len(res.Dropped))
			if err != nil && ctx.Err() == nil {
				r.err = err
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		what := fmt.Sprintf("removed %d inbox rows", r.rows)
		if c.o.Inbox.Partitioned {
			what = fmt.Sprintf("dropped %d partitions (%d inbox rows)", r.dropped, r.rows)
		}
		c.notes.add(fmt.Sprintf("retention ran beside the stream every %s keeping %s of history: %d passes, %s, busy %s",
			every, days(keep), r.passes, what, r.busy.Round(time.Millisecond)))
		if r.err != nil {
			c.notes.add("retention failed during the cell: " + r.err.Error())
		}
	}
}
