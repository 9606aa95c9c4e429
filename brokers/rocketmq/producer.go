package rocketmq

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// The producer the queue senders share, and its replacement after a
// failed send. The client library resolves a queue's broker from a route
// it refreshes every 30 s, and offers no way to refresh it sooner: after
// a master switch (controller mode) every send would go to the lost
// master for up to 30 s. So a send that fails for a reason the broker's
// route could explain (anything but a busy broker, a flush or slave
// timeout, or the caller's context) replaces the producer with a new one
// (a client instance of its own, which fetches the route afresh on its
// first send), at most once per refreshEvery; the caller sends the
// failed messages again with their ids. The replaced producer is shut
// down once the sends it has in flight are over (sendTimeout).

// refreshEvery bounds how often a failed send replaces the producer
// (while the name server has no master for the group yet, each new one
// finds none, and the next failure tries again).
const refreshEvery = time.Second

type producers struct {
	mu      sync.Mutex
	cur     producerAPI
	madeAt  time.Time
	retired map[producerAPI]bool // replaced, not shut down yet
	closed  bool
	// make creates a started producer (the client library's; tests put
	// a fake in its place).
	make func() (producerAPI, error)
	// refreshed counts replacements (the durability report and tests).
	refreshed int
}

// producer returns the producer in use, creating it on first use.
func (b *Broker) producer() (producerAPI, error) {
	ps := &b.producers
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, errors.New("rocketmq: broker is closed")
	}
	if ps.cur != nil {
		return ps.cur, nil
	}
	p, err := ps.maker(b)()
	if err != nil {
		return nil, err
	}
	ps.cur, ps.madeAt = p, time.Now()
	return p, nil
}

func (ps *producers) maker(b *Broker) func() (producerAPI, error) {
	if ps.make != nil {
		return ps.make
	}
	return b.newClientProducer
}

// newClientProducer starts one of the client library's producers under
// a client instance name of its own.
func (b *Broker) newClientProducer() (producerAPI, error) {
	opts := []producer.Option{
		producer.WithNsResolver(b.resolver()),
		producer.WithQueueSelector(queueSelector{}),
		producer.WithInstanceName(b.uniqueName("producer")),
		producer.WithGroupName("inboxbench-producer"),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(b.sendTimeout),
	}
	if b.creds.AccessKey != "" {
		opts = append(opts, producer.WithCredentials(b.creds))
	}
	p, err := producer.NewDefaultProducer(opts...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: create producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("rocketmq: start producer: %w", err)
	}
	return p, nil
}

// refreshProducer replaces stale, the producer a send failed on, unless
// it was replaced already or was made less than refreshEvery ago.
func (b *Broker) refreshProducer(stale producerAPI) {
	ps := &b.producers
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed || ps.cur != stale || time.Since(ps.madeAt) < refreshEvery {
		return
	}
	p, err := ps.maker(b)()
	if err != nil {
		ps.madeAt = time.Now() // try again after refreshEvery
		return
	}
	ps.cur, ps.madeAt = p, time.Now()
	ps.refreshed++
	if p == stale {
		return // a fake that stays the same
	}
	if ps.retired == nil {
		ps.retired = map[producerAPI]bool{}
	}
	ps.retired[stale] = true
	time.AfterFunc(b.sendTimeout, func() {
		ps.mu.Lock()
		ours := ps.retired[stale]
		delete(ps.retired, stale)
		ps.mu.Unlock()
		if ours {
			_ = stale.Shutdown()
		}
	})
}

// Refreshes reports how many times a failed send replaced the producer.
func (b *Broker) Refreshes() int {
	b.producers.mu.Lock()
	defer b.producers.mu.Unlock()
	return b.producers.refreshed
}

// closeProducers shuts down the producer in use and the replaced ones;
// no producer is made after it.
func (b *Broker) closeProducers() error {
	ps := &b.producers
	ps.mu.Lock()
	ps.closed = true
	all := []producerAPI{}
	if ps.cur != nil {
		all = append(all, ps.cur)
	}
	for p := range ps.retired {
		all = append(all, p)
	}
	ps.retired = nil
	ps.mu.Unlock()
	var errs []error
	for _, p := range all {
		if !driverutil.Bounded(15*time.Second, func() { _ = p.Shutdown() }) {
			errs = append(errs, errors.New("rocketmq: producer shutdown did not finish within 15s"))
		}
	}
	return errors.Join(errs...)
}
