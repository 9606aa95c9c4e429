package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// DefaultGroup is used when Subscribe is given an empty group.
const DefaultGroup = "inboxbench"

// Timing of the orderly consumer.
const (
	// rebalanceEvery: member list, allocation, lock renewal and offset
	// commit, when the group is settled; unsettledEvery while this
	// consumer waits for a queue another member still holds.
	rebalanceEvery = time.Second
	unsettledEvery = 200 * time.Millisecond
	// lockLease is how long after a successful lock (or renewal) a queue
	// is consumed without another one: it must be shorter than the
	// broker's rocketmq.broker.rebalance.lockMaxLiveTime (60 s by default,
	// 6 s on the local stack), after which the broker may give the queue
	// to another member.
	lockLease = 5 * time.Second
	// heartbeatEvery keeps the consumer registered (brokers expire a
	// silent client after 120 s).
	heartbeatEvery = 10 * time.Second
	// routeEvery refreshes the topic's queues and brokers; a call to a
	// broker that fails (a lost or switched master) refreshes it at the
	// next round (routeStale).
	routeEvery = 30 * time.Second
	// pullHold is how long the broker may hold a pull that found nothing
	// (long polling: it answers as soon as a message arrives); the pull
	// itself times out after twice that (a CPU-starved broker answers
	// late), as the Java client's 15 s / 30 s.
	pullHold = 15 * time.Second
	// pullMax is the most messages asked for per pull; the broker answers
	// with at most maxTransferCountOnMessageInMemory (32 by default).
	pullMax = 32
	// callTimeout bounds every request but a held pull.
	callTimeout = 5 * time.Second
)

type subscription struct {
	driverutil.Sub
	b        *Broker
	topic    string
	group    string
	gc       *groupClient
	clientID string

	ctx    context.Context // cancelled by Close and Crash: stops everything
	cancel context.CancelFunc

	endOnce  sync.Once
	kick     chan struct{} // cap 1: rebalance now
	loopDone chan struct{}

	mu        sync.Mutex
	workers   map[queue]*worker       // queues this consumer holds
	releasing map[queue]chan struct{} // queues being handed back; closed when done
	route     *topicRoute
	routeAt   time.Time
	beatAt    time.Time

	commitMu sync.Mutex // one commit of a queue at a time
	// routeStale: a call to a broker failed since the route was fetched;
	// the next round fetches it again instead of waiting for routeEvery.
	routeStale atomic.Bool
}

// Subscribe implements brokers.Broker with an orderly clustering consumer
// of group (a new group starts at the first offset); see the package doc.
func (b *Broker) Subscribe(ctx context.Context, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	if group == "" {
		group = DefaultGroup
	}
	if n, err := b.queues(ctx, topic); err != nil || n == 0 {
		return nil, fmt.Errorf("rocketmq: subscribe %s: no route for the topic (run Setup first): %v", topic, err)
	}
	if _, err := b.producer(); err != nil { // Reject needs it; fail now, not mid-stream
		return nil, err
	}
	return b.subscribe(ctx, topic, group, opts, h)
}

// subscribe joins group and starts consuming: Subscribe once the topic
// and the producer are known to be there (the fake broker of the tests
// serves neither topic queries nor sends).
func (b *Broker) subscribe(ctx context.Context, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) (*subscription, error) {
	host, _ := os.Hostname()
	s := &subscription{
		b: b, topic: topic, group: group,
		clientID:  host + "@" + b.uniqueName("consumer"),
		kick:      make(chan struct{}, 1),
		loopDone:  make(chan struct{}),
		workers:   map[queue]*worker{},
		releasing: map[queue]chan struct{}{},
	}
	s.Init(opts, h, s.end)
	s.gc = newGroupClient(b.rm, group, s.clientID, s.rebalanceSoon)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// Register now, so a broker that cannot be reached fails Subscribe
	// (bounded by ctx) instead of a consumer that never consumes.
	if err := s.heartbeatAll(ctx); err != nil {
		s.abandon()
		return nil, fmt.Errorf("rocketmq: subscribe %s as %s: %w", topic, group, err)
	}
	if !b.subs.Add(s) {
		s.abandon()
		return nil, errors.New("rocketmq: subscribe: broker is closed")
	}
	go s.loop()
	return s, nil
}

// abandon undoes a Subscribe that failed after registering with some
// broker: a member that never consumes would otherwise hold its share of
// the queues until the broker expires it (120 s).
func (s *subscription) abandon() {
	s.cancel()
	s.mu.Lock()
	route := s.route
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	s.leave(ctx, nil, route)
	s.gc.close()
}

func (s *subscription) rebalanceSoon() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// end stops the subscription once: the rebalance loop and every queue
// worker stop (a running handler finishes; what it settled counts),
// finished offsets are committed unless it crashed, the queues are
// unlocked and the consumer leaves the group, so the other members take
// over at once.
func (s *subscription) end(cause error) {
	s.endOnce.Do(func() {
		s.cancel()
		go func() {
			<-s.loopDone
			s.mu.Lock()
			held := make([]*worker, 0, len(s.workers))
			for _, w := range s.workers {
				held = append(held, w)
			}
			var pending []chan struct{}
			for _, ch := range s.releasing {
				pending = append(pending, ch)
			}
			route := s.route
			s.mu.Unlock()
			for _, w := range held {
				<-w.exited
			}
			for _, ch := range pending {
				<-ch
			}
			errs := []error{cause}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if !s.Crashed() {
				for _, w := range held {
					if err := s.commit(ctx, w); err != nil {
						errs = append(errs, fmt.Errorf("rocketmq: commit the offset of %s (its last messages will be redelivered): %w", w.q, err))
					}
				}
			}
			s.leave(ctx, held, route)
			s.gc.close()
			s.b.subs.Remove(s)
			s.Finish(errors.Join(errs...))
		}()
	})
}

// leave unlocks the queues held and unregisters from every broker; both
// only speed up the hand-over (locks expire, silent clients are dropped),
// so failures are not errors.
func (s *subscription) leave(ctx context.Context, held []*worker, route *topicRoute) {
	byAddr := map[string][]queue{}
	for _, w := range held {
		byAddr[w.addr] = append(byAddr[w.addr], w.q)
	}
	for addr, qs := range byAddr {
		_ = s.gc.unlock(ctx, addr, qs)
	}
	if route != nil {
		for _, addr := range route.masters {
			_ = s.gc.unregister(ctx, addr)
		}
	}
}

// loop rebalances and commits until the subscription ends.
func (s *subscription) loop() {
	defer close(s.loopDone)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		settled := s.rebalance()
		s.commitAll()
		next := rebalanceEvery
		if !settled {
			next = unsettledEvery
		}
		t.Reset(next)
	}
}

func (s *subscription) routeFor(ctx context.Context) (*topicRoute, error) {
	s.mu.Lock()
	r, at := s.route, s.routeAt
	s.mu.Unlock()
	if r != nil && time.Since(at) < routeEvery && !s.routeStale.Load() {
		return r, nil
	}
	// Cleared before the query: a failure during it marks the new route
	// stale again.
	s.routeStale.Store(false)
	r, err := s.b.rm.fetchRoute(ctx, s.b.namesrv, s.topic)
	if err != nil {
		s.routeStale.Store(true)
		return nil, err
	}
	s.mu.Lock()
	s.route, s.routeAt = r, time.Now()
	s.mu.Unlock()
	return r, nil
}

func (s *subscription) heartbeatAll(ctx context.Context) error {
	r, err := s.routeFor(ctx)
	if err != nil {
		return err
	}
	version := time.Now().UnixMilli()
	for _, addr := range r.masters {
		if err := s.gc.heartbeat(ctx, addr, s.topic, version); err != nil {
			return fmt.Errorf("heartbeat to broker %s: %w", addr, err)
		}
	}
	s.mu.Lock()
	s.beatAt = time.Now()
	s.mu.Unlock()
	return nil
}

// needsHeartbeat: it is time, or a broker's connection is new (a broker
// that restarted has forgotten the consumer).
func (s *subscription) needsHeartbeat(r *topicRoute) bool {
	s.mu.Lock()
	at := s.beatAt
	s.mu.Unlock()
	if time.Since(at) > heartbeatEvery {
		return true
	}
	for _, addr := range r.masters {
		if s.gc.fresh(addr) {
			return true
		}
	}
	return false
}

// members returns the group's members as the first reachable broker of
// the topic sees them.
func (s *subscription) members(ctx context.Context, r *topicRoute) ([]string, error) {
	var errs []error
	for _, addr := range r.masters {
		ids, err := s.gc.members(ctx, addr)
		if err == nil {
			return ids, nil
		}
		errs = append(errs, fmt.Errorf("broker %s: %w", addr, err))
	}
	return nil, errors.Join(errs...)
}
