package runner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
	"github.com/inboxbench/inboxbench/workload"
)

// publisher sends a cell's plan to the broker: open loop at the
// workload's rate, from several goroutines that each own a share of the
// ordering keys, with the plan's send-side faults (retries, reorders,
// republishes are already in the plan) and the poison messages.
type publisher struct {
	b      brokers.Broker
	topic  string
	plan   *workload.Plan
	spec   *workload.Spec
	poison [][]byte
	t      *tally
	notes  *notes
	// sent[j] marks Publishes[j] confirmed by the broker; each goroutine
	// writes only its own indexes.
	sent []bool
	// maxLag is the longest a batch went out after it was due (ns).
	maxLag atomic.Int64
}

// cut reports whether publishing stopped before the end of the plan (a
// workload's duration was up).
func (p *publisher) cut() bool {
	for _, s := range p.sent {
		if !s {
			return true
		}
	}
	return false
}

// total is the number of messages the publisher sends.
func (p *publisher) total() int64 { return int64(len(p.plan.Publishes) + len(p.poison)) }

// run sends the plan, starting at start (the zero of the intended send
// times). Each publisher goroutine owns the ordering keys that hash to it
// and sends them in plan order, so every key's order (and every fault the
// plan placed in it) is the plan's while the broker has several batches in
// flight.
func (p *publisher) run(ctx context.Context, start time.Time) error {
	pubs := p.plan.Publishes
	p.sent = make([]bool, len(pubs))
	n := max(1, min(p.spec.Publishers, len(pubs)))
	own := make([][]int, n)
	for j := range pubs {
		h := fnv.New32a()
		h.Write([]byte(pubs[j].OrderingKey()))
		k := int(h.Sum32() % uint32(n))
		own[k] = append(own[k], j)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.part(ctx, start, own[k], k == 0); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// part sends one publisher's share of the plan (indexes into Publishes,
// in plan order) in batches; an event's intended send time comes from its
// place in the whole plan. At a rate, a batch spans at most 5ms of
// intended time and is sent when its last message is due, so nothing is
// sent early and an event's latency, counted from its intended time,
// never starts before it could have been sent; how late the batch went
// out is the publish lag.
func (p *publisher) part(ctx context.Context, start time.Time, idx []int, first bool) error {
	rate := p.spec.PublishRate
	batch := 256
	if rate > 0 {
		perPublisher := rate / float64(max(1, min(p.spec.Publishers, len(p.plan.Publishes))))
		batch = max(1, min(256, int(perPublisher*0.005)))
	}
	intendedAt := func(j int) time.Time {
		return start.Add(time.Duration(float64(j) / rate * float64(time.Second)))
	}
	msgs := make([]brokers.Message, 0, batch)
	for i := 0; i < len(idx); i += batch {
		part := idx[i:min(i+batch, len(idx))]
		intended := time.Now()
		if rate > 0 {
			due := intendedAt(part[len(part)-1])
			if !ctxtime.Sleep(ctx, time.Until(due)) {
				return ctx.Err()
			}
			p.noteLag(time.Since(due))
			intended = intendedAt(part[0])
		}
		msgs = msgs[:0]
		for _, j := range part {
			ev := *p.plan.Publishes[j].Event
			ev.IntendedAt = intended
			if rate > 0 {
				ev.IntendedAt = intendedAt(j)
			}
			body, err := p.spec.Encode(&ev)
			if err != nil {
				return fmt.Errorf("encode %s: %w", ev.ID, err)
			}
			msgs = append(msgs, brokers.Message{Key: p.plan.Publishes[j].OrderingKey(), ID: ev.Key(), Body: body})
		}
		if err := p.send(ctx, msgs); err != nil {
			return err
		}
		for _, j := range part {
			p.sent[j] = true
		}
		p.t.c.published.Add(int64(len(msgs)))
		if i == 0 && first && len(p.poison) > 0 {
			if err := p.sendPoison(ctx); err != nil {
				return err
			}
		}
		if p.spec.Duration > 0 && time.Since(start) > p.spec.Duration.D() {
			break
		}
	}
	return nil
}

// noteLag keeps the largest publish lag seen.
func (p *publisher) noteLag(d time.Duration) {
	for {
		cur := p.maxLag.Load()
		if int64(d) <= cur || p.maxLag.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// send publishes one batch and waits for its confirmations. A failed batch
// is sent again, whole, with the same event ids (a producer's retry: what
// was confirmed before arrives twice and is deduplicated), for up to two
// minutes: a broker restart must not end the run, a dead broker must.
func (p *publisher) send(ctx context.Context, msgs []brokers.Message) error {
	deadline := time.Now().Add(2 * time.Minute)
	backoff := 200 * time.Millisecond
	for {
		sent := time.Now()
		err := brokers.FirstError(p.b.Publish(ctx, p.topic, msgs))
		if err == nil {
			p.t.meters.recordPublish(time.Since(sent), len(msgs))
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s: publish to %s: %w", p.b.Name(), p.topic, err)
		}
		p.t.c.publishRetries.Add(1)
		p.notes.add(fmt.Sprintf("publish to %s failed, sending the batch again: %v", p.topic, err))
		if !ctxtime.Sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// sendPoison sends the malformed bodies after the first batch, so they sit
// in the middle of the stream.
func (p *publisher) sendPoison(ctx context.Context) error {
	msgs := make([]brokers.Message, len(p.poison))
	for i, body := range p.poison {
		msgs[i] = brokers.Message{Key: fmt.Sprintf("poison-%d", i), ID: fmt.Sprintf("poison-%d", i), Body: body}
	}
	if err := p.send(ctx, msgs); err != nil {
		return err
	}
	p.t.c.published.Add(int64(len(msgs)))
	return nil
}
