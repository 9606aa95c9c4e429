package nats

import (
	"context"
	"fmt"
	"sync"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// publisher is the driver's publishing (and administration) connection:
// its window of unacknowledged messages and the collector that settles
// their PubAcks in publish order.
type publisher struct {
	nc      *natsgo.Conn
	js      jetstream.JetStream
	slots   chan struct{}   // one per message in the window
	pending chan pubPending // publish order
	quit    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// pubPending is one published message waiting for its PubAck.
type pubPending struct {
	f jetstream.PubAckFuture
	p *driverutil.Pending
	i int
}

func newPublisher(cfg config.Config, window int) (*publisher, error) {
	nc, err := Connect(cfg, "inboxbench-publisher")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window), jetstream.WithPublishAsyncTimeout(pubTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	p := &publisher{nc: nc, js: js, slots: make(chan struct{}, window), pending: make(chan pubPending, window), quit: make(chan struct{})}
	p.wg.Add(1)
	go p.collect()
	return p, nil
}

// collect settles each message when its PubAck (or failure) arrives, in
// publish order, and frees its window slot after.
func (p *publisher) collect() {
	defer p.wg.Done()
	for {
		var pp pubPending
		select {
		case <-p.quit:
			return
		case pp = <-p.pending:
		}
		select {
		case ack := <-pp.f.Ok():
			var err error
			if ack.Duplicate {
				err = brokers.ErrDeduplicated
			}
			pp.p.Settle(pp.i, err)
		case err := <-pp.f.Err():
			pp.p.Settle(pp.i, fmt.Errorf("nats: publish to stream: %w", err))
		case <-p.quit:
			return
		}
		<-p.slots
	}
}

// close closes the connection (which fails what it holds) and stops the
// collector; Broker.Close then fails what is left unsettled.
func (p *publisher) close() {
	p.once.Do(func() {
		_ = p.nc.FlushTimeout(pubTimeout / 6)
		p.nc.Close()
		close(p.quit)
		p.wg.Wait()
	})
}

// Publish implements brokers.Broker: PublishAsync and a wait.
func (b *Broker) Publish(ctx context.Context, topic string, msgs []brokers.Message) []error {
	return brokers.PublishWait(ctx, b, topic, msgs)
}

// PublishAsync implements brokers.AsyncPublisher: each message goes to
// its shard's subject on the one publishing connection, in slice order,
// once a window slot is free; the collector settles its PubAck.
func (b *Broker) PublishAsync(ctx context.Context, topic string, msgs []brokers.Message, done func([]error)) {
	call := b.calls.Start(ctx, topic, msgs, done)
	if call == nil || ctx.Err() != nil {
		return
	}
	p, err := b.conn()
	n := 0
	if err == nil {
		n, err = b.shardCount(ctx, topic)
	}
	if err != nil {
		call.SettleAllInCall(err)
		return
	}
	for i := range msgs {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return // the call fails the rest with ctx's error
		case <-p.quit:
			call.SettleInCall(i, fmt.Errorf("nats: publish to %s: broker is closed", topic))
			continue
		}
		f, err := p.js.PublishMsgAsync(natsMsg(Subject(topic, driverutil.Shard(msgs[i].Key, n)), &msgs[i]))
		if err != nil {
			<-p.slots
			call.SettleInCall(i, fmt.Errorf("nats: publish to %s: %w", topic, err))
			continue
		}
		select {
		case p.pending <- pubPending{f: f, p: call, i: i}:
		case <-p.quit:
			call.SettleInCall(i, fmt.Errorf("nats: publish to %s: broker is closed", topic))
		}
	}
}

// natsMsg is m as published to subject: the body as data, the event id
// as Nats-Msg-Id, the key and the caller's headers as headers.
func natsMsg(subject string, m *brokers.Message) *natsgo.Msg {
	h := make(natsgo.Header, len(m.Headers)+2)
	for k, v := range m.Headers {
		h[k] = []string{v}
	}
	h[HeaderKey] = []string{m.Key}
	if m.ID != "" {
		h[jetstream.MsgIDHeader] = []string{m.ID}
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: m.Body}
}
