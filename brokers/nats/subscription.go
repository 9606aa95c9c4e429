package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// subscription consumes every shard stream of a topic as one durable
// consumer per stream, over a connection of its own.
type subscription struct {
	driverutil.Sub
	b       *Broker
	topic   string
	group   string
	nc      *natsgo.Conn
	js      jetstream.JetStream
	parts   []*part
	ctx     context.Context // the workers'; cancelled by end
	cancel  context.CancelFunc
	workers sync.WaitGroup
	endOnce sync.Once
	started chan struct{} // closed when Subscribe has started (or failed to start) every pull
}

// part is one shard stream's consumer and what its worker holds.
type part struct {
	s     *subscription
	shard int
	name  string // the stream
	cons  jetstream.Consumer
	cc    jetstream.ConsumeContext
	in    chan jetstream.Msg

	mu   sync.Mutex
	held map[uint64]*heldMsg // by stream sequence: admitted and not settled
	next uint64              // the stream sequence to hand over next; 0 before the first message
}

// heldMsg is a message the worker holds: early (its predecessors have not
// arrived), ready or in the Handler. since is when it was last marked in
// progress.
type heldMsg struct {
	m     jetstream.Msg
	md    *jetstream.MsgMetadata
	since time.Time
	early bool
}

// Subscribe implements brokers.Broker: a durable consumer named after
// group on each shard stream (created or updated), consumed by this
// subscription whenever the server pins the stream's priority group to
// it.
func (b *Broker) Subscribe(ctx context.Context, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	n, err := b.shardCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	nc, err := Connect(b.cfg, "inboxbench-consumer-"+group)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	s := &subscription{b: b, topic: topic, group: group, nc: nc, js: js, started: make(chan struct{})}
	s.Init(opts, h, s.end)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for i := range n {
		p, err := s.newPart(ctx, i)
		if err != nil {
			nc.Close()
			return nil, err
		}
		s.parts = append(s.parts, p)
	}
	if !b.subs.Add(s) {
		nc.Close()
		return nil, errors.New("nats: broker is closed")
	}
	// Every stream is pulled before any worker hands a message over: a
	// handler that crashes on the first batch ends the subscription (and
	// closes its connection) only once all its pulls exist. end waits for
	// started, so a Close meanwhile does not race with the loop either.
	err = nil
	for _, p := range s.parts {
		if err = p.consume(); err != nil {
			break
		}
	}
	if err == nil {
		s.workers.Add(len(s.parts) + 1) // before started: end's Wait counts them
	}
	close(s.started)
	if err != nil {
		s.end(err)
		return nil, err
	}
	for _, p := range s.parts {
		go p.work()
	}
	go s.keepInProgress()
	return s, nil
}

// newPart creates (or updates) group's consumer on shard i's stream.
func (s *subscription) newPart(ctx context.Context, i int) (*part, error) {
	b := s.b
	name := StreamName(s.topic, i)
	cons, err := s.js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable: consumerName(s.group), AckPolicy: jetstream.AckExplicitPolicy, AckWait: b.ackWait,
		MaxDeliver: b.maxDeliver, MaxAckPending: s.Opts.Prefetch, DeliverPolicy: jetstream.DeliverAllPolicy,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{priorityGroup}, PinnedTTL: b.pinnedTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("nats: consumer %s on %s: %w", consumerName(s.group), name, err)
	}
	return &part{s: s, shard: i, name: name, cons: cons, in: make(chan jetstream.Msg, s.Opts.Prefetch), held: map[uint64]*heldMsg{}}, nil
}

// consume pulls the stream into p.in; p.work hands it over.
func (p *part) consume() error {
	s := p.s
	expiry := min(max(s.b.pinnedTTL/2, time.Second), 30*time.Second)
	cc, err := p.cons.Consume(func(m jetstream.Msg) {
		if s.Opts.SettleOnReceipt && !s.settleOnReceipt(m) {
			return
		}
		s.Received(1)
		select {
		case p.in <- m:
		case <-s.ctx.Done():
		}
	}, jetstream.PullMaxMessages(s.Opts.Prefetch), jetstream.PullExpiry(expiry), jetstream.PullPriorityGroup(priorityGroup),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			// A lost connection is reconnected (and the pulls sent
			// again) by nats.go; a deleted consumer is the end.
			if errors.Is(err, jetstream.ErrConsumerDeleted) && s.ctx.Err() == nil {
				s.end(fmt.Errorf("nats: consume %s: %w", p.name, err))
			}
		}))
	if err != nil {
		return fmt.Errorf("nats: consume %s: %w", p.name, err)
	}
	p.cc = cc
	return nil
}

// settleOnReceipt is the negative control SettleOnReceipt: m is
// acknowledged, and the server's answer awaited, before it reaches the
// worker. It reports false when the ack failed (m is then redelivered
// after AckWait, and not handed over now).
func (s *subscription) settleOnReceipt(m jetstream.Msg) bool {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	return m.DoubleAck(ctx) == nil
}

// work hands the shard's messages to the Handler in stream order, in
// batches of what is ready (never waiting to fill one).
func (p *part) work() {
	s := p.s
	defer s.workers.Done()
	var ready []*heldMsg
	gap := time.NewTicker(max(s.b.ackWait/2, 100*time.Millisecond))
	defer gap.Stop()
	for s.ctx.Err() == nil {
		if len(ready) == 0 {
			select {
			case m := <-p.in:
				ready = p.admit(m, ready)
			case <-gap.C:
				ready = p.refloor(ready)
			case <-s.ctx.Done():
				return
			}
			continue
		}
	drain:
		for len(ready) < s.Opts.MaxBatch {
			select {
			case m := <-p.in:
				ready = p.admit(m, ready)
			default:
				break drain
			}
		}
		n := min(len(ready), s.Opts.MaxBatch)
		batch := ready[:n]
		ready = ready[n:]
		if !p.handle(batch) {
			return
		}
	}
}

// admit files m by its stream sequence and returns ready with what is
// now in order appended: m when it is the next, then whatever early
// messages follow it. A message before the next is a redelivery of one
// held (its newer handle replaces the old) or already settled (acked
// again).
func (p *part) admit(m jetstream.Msg, ready []*heldMsg) []*heldMsg {
	md, err := m.Metadata()
	if err != nil {
		_ = m.Nak() // not a JetStream message: let the server have it back
		return ready
	}
	seq := md.Sequence.Stream
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == 0 {
		p.mu.Unlock()
		floor, err := p.ackFloor()
		p.mu.Lock()
		if err != nil {
			floor = seq - 1 // the first message we see starts the order
		}
		p.next = floor + 1
	}
	if h, ok := p.held[seq]; ok {
		h.m, h.md = m, md
		return ready
	}
	switch {
	case seq < p.next:
		_ = m.Ack() // settled before (its ack was lost, or another owner's)
		return ready
	case seq > p.next:
		p.held[seq] = &heldMsg{m: m, md: md, since: time.Now(), early: true}
		return ready
	}
	h := &heldMsg{m: m, md: md, since: time.Now()}
	p.held[seq] = h
	p.next++
	return p.releaseLocked(append(ready, h))
}

// releaseLocked appends the early messages that now follow in order.
func (p *part) releaseLocked(ready []*heldMsg) []*heldMsg {
	for {
		h, ok := p.held[p.next]
		if !ok || !h.early {
			return ready
		}
		h.early = false
		ready = append(ready, h)
		p.next++
	}
}

// refloor moves the next sequence past a hole the server will not fill:
// messages another owner acknowledged (or the server gave up on), below
// the consumer's ack floor.
func (p *part) refloor(ready []*heldMsg) []*heldMsg {
	p.mu.Lock()
	early := false
	for _, h := range p.held {
		early = early || h.early
	}
	p.mu.Unlock()
	if !early {
		return ready
	}
	floor, err := p.ackFloor()
	if err != nil {
		return ready
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.next <= floor {
		if h, ok := p.held[p.next]; ok && h.early {
			delete(p.held, p.next)
		}
		p.next++
	}
	return p.releaseLocked(ready)
}

// ackFloor asks the server for the consumer's ack floor (a stream
// sequence: every message up to it is acknowledged), after what this
// subscription acknowledged reached it.
func (p *part) ackFloor() (uint64, error) {
	ctx, cancel := context.WithTimeout(p.s.ctx, 5*time.Second)
	defer cancel()
	_ = p.s.nc.FlushWithContext(ctx)
	info, err := p.cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.AckFloor.Stream, nil
}

// handle runs the Handler on batch until it is settled; false when the
// worker is to stop. A message delivered MaxDeliver times (its consumers
// crashed each time) is dead-lettered without reaching the Handler: the
// server would not deliver it again.
func (p *part) handle(batch []*heldMsg) bool {
	s := p.s
	ds := make([]*brokers.Delivery, 0, len(batch))
	held := make(map[*brokers.Delivery]*heldMsg, len(batch))
	for _, h := range batch {
		if h.md.NumDelivered > 1 && int(h.md.NumDelivered) >= s.b.maxDeliver {
			if err := p.deadLetter(h); err != nil {
				s.end(err)
				return false
			}
			p.settled(h)
			continue
		}
		d := p.delivery(h)
		ds = append(ds, d)
		held[d] = h
	}
	if len(ds) == 0 {
		return true
	}
	return s.Handle(s.ctx, ds, func(settle []*brokers.Delivery, vs []brokers.Verdict) error {
		for i, d := range settle {
			h := held[d]
			switch {
			case s.Opts.SettleOnReceipt: // acknowledged on receipt; a Reject is not dead-lettered
			case vs[i] == brokers.Reject:
				if err := p.deadLetter(h); err != nil {
					return err
				}
			default:
				if err := h.m.Ack(); err != nil {
					return fmt.Errorf("nats: ack %s: %w", d.TransportID, err)
				}
			}
			p.settled(h)
		}
		return nil
	}, s.end)
}

// settled forgets a message acknowledged or dead-lettered.
func (p *part) settled(h *heldMsg) {
	p.mu.Lock()
	delete(p.held, h.md.Sequence.Stream)
	p.mu.Unlock()
}

// delivery is h as the Handler sees it.
func (p *part) delivery(h *heldMsg) *brokers.Delivery {
	return &brokers.Delivery{Message: message(h.m.Headers(), h.m.Data()),
		Redelivered: h.md.NumDelivered > 1, DeliveryCount: int(h.md.NumDelivered),
		TransportID: p.name + "@" + strconv.FormatUint(h.md.Sequence.Stream, 10),
		Shard:       strconv.Itoa(p.shard), BrokerTime: h.md.Timestamp}
}

// deadLetter copies h to the dead-letter stream, waits for its PubAck,
// then terminates h.
func (p *part) deadLetter(h *heldMsg) error {
	src := p.name + "@" + strconv.FormatUint(h.md.Sequence.Stream, 10)
	m := message(h.m.Headers(), h.m.Data())
	out := natsMsg(DLQSubject(p.s.topic), &m)
	out.Header[headerID] = []string{m.ID}
	out.Header[headerSource] = []string{src}
	out.Header[jetstream.MsgIDHeader] = []string{src}
	// Not the workers' context: a Handler finishing during Close still
	// gets its Rejects dead-lettered.
	ctx, cancel := context.WithTimeout(context.Background(), pubTimeout)
	defer cancel()
	if _, err := p.s.js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("nats: dead-letter %s: %w", src, err)
	}
	if err := h.m.TermWithReason("dead-lettered to " + DLQStream(p.s.topic)); err != nil {
		return fmt.Errorf("nats: terminate %s: %w", src, err)
	}
	return nil
}

// keepInProgress marks every message held for a third of AckWait in
// progress, so the server does not deliver it again while it waits for
// its predecessors, in the buffer or in the Handler.
func (s *subscription) keepInProgress() {
	defer s.workers.Done()
	every := max(s.b.ackWait/3, 50*time.Millisecond)
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			for _, p := range s.parts {
				p.mu.Lock()
				for _, h := range p.held {
					if now.Sub(h.since) >= every {
						_ = h.m.InProgress()
						h.since = now
					}
				}
				p.mu.Unlock()
			}
		}
	}
}

// end is the subscription's shutdown, once: cause nil is Close (running
// Handler calls finish and their acks reach the server, what is held
// goes back at once, the shards are unpinned for the next owner),
// anything else a crash or a failure (the connection is closed with
// nothing more acknowledged: the server redelivers after AckWait).
func (s *subscription) end(cause error) {
	s.endOnce.Do(func() {
		go func() {
			<-s.started
			for _, p := range s.parts {
				if p.cc != nil {
					p.cc.Stop()
				}
			}
			s.cancel()
			s.workers.Wait()
			if cause == nil {
				s.handBack()
			}
			s.nc.Close()
			s.b.subs.Remove(s)
			s.Finish(cause)
		}()
	})
}

// handBack, on Close, gives back what the workers held unfinished (a
// Nak: delivered again at once) and unpins every shard, so the next
// subscription takes over without waiting for AckWait or PinnedTTL.
func (s *subscription) handBack() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range s.parts {
		p.mu.Lock()
		for _, h := range p.held {
			_ = h.m.Nak()
		}
		p.held = map[uint64]*heldMsg{}
		p.mu.Unlock()
	drain:
		for {
			select {
			case m := <-p.in:
				_ = m.Nak()
			default:
				break drain
			}
		}
	}
	_ = s.nc.FlushWithContext(ctx)
	for _, p := range s.parts {
		if st, err := s.js.Stream(ctx, p.name); err == nil {
			_ = st.UnpinConsumer(ctx, consumerName(s.group), priorityGroup)
		}
	}
}
