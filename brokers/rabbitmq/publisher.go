package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// pubConn is the publishing connection as its confirm channels share it:
// a confirm timeout on one channel closes the connection, and every
// message it leaves unconfirmed fails naming the timeout (and the alarm).
type pubConn struct {
	conn *amqp.Connection
	// timedOut is the block reason at the confirm timeout that closed
	// conn ("" if it was not blocked); nil while no timeout fired.
	timedOut atomic.Pointer[string]
}

// queuePub publishes to one shard queue on a confirm channel of its own,
// so the queue's messages reach it in hand-over order whoever calls, with
// at most window of them unconfirmed (a confirm window, like PerfTest's
// --confirm). A collector goroutine per channel settles the confirms in
// order.
//
// A hand-over writes the message itself only when no write to the queue
// is under way; otherwise it queues the message (once it has a place in
// the window) and returns, and the write under way, then a writer
// goroutine, takes the queued ones in hand-over order. Writing every
// message inside the call made callers wait for each other and for the
// connection the queues' channels share: measured at 4,000 messages/s on
// the local stack, a call took 6.2 ms at p99 and up to 72 ms, and every
// message due meanwhile went out late.
type queuePub struct {
	b      *Broker
	queue  string
	window chan struct{} // a token per message handed over and not settled

	omu     sync.Mutex
	out     []outgoing // handed over, not written yet, oldest first
	writing bool       // a write is under way: a caller's, or the writer goroutine emptying out

	mu      sync.Mutex // held while writing: one write at a time, so the order of the FIFO is the wire's
	cur     *confirmChan
	dropped bool // DeleteTopic or Close: no channel any more
}

// outgoing is a message handed over to a queue and waiting for its write.
type outgoing struct {
	p *driverutil.Pending
	i int
	m *brokers.Message
}

// confirmChan is one confirm-mode channel of a queuePub and the messages
// handed to it, oldest first, until each is settled.
type confirmChan struct {
	q   *queuePub
	pc  *pubConn
	ch  *amqp.Channel
	ret chan amqp.Return // basic.return of mandatory messages nobody could route
	// closed reports the channel's end; the collector goes on until what
	// was handed to it is settled.
	closed chan *amqp.Error

	mu      sync.Mutex
	pending []*entry
	dead    bool          // no more hand-overs: the channel closed or failed a send
	wake    chan struct{} // an entry was pushed or written (capacity 1)
}

// entry is one message on its way: pushed before it is written (so a
// stuck write has a deadline too), written once Publish returned.
type entry struct {
	p        *driverutil.Pending
	i        int
	id       string
	deadline time.Time
	written  bool
	dc       *amqp.DeferredConfirmation
	err      error  // the write failed
	returned string // why the broker returned it, "" if it did not
}

// publishers returns the topic's queue publishers, creating them on first
// use.
func (b *Broker) publishers(topic string) ([]*queuePub, error) {
	b.mu.Lock()
	qs, ok := b.pubs[topic]
	b.mu.Unlock()
	if ok {
		return qs, nil
	}
	n, err := b.shardCount(topic)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if qs, ok := b.pubs[topic]; ok {
		return qs, nil
	}
	qs = make([]*queuePub, n)
	for i := range qs {
		qs[i] = &queuePub{b: b, queue: queueName(topic, i), window: make(chan struct{}, b.window)}
	}
	b.pubs[topic] = qs
	return qs, nil
}

// dropPublishers closes the topic's confirm channels (DeleteTopic).
func (b *Broker) dropPublishers(topic string) {
	b.mu.Lock()
	qs := b.pubs[topic]
	delete(b.pubs, topic)
	b.mu.Unlock()
	for _, q := range qs {
		q.close()
	}
}

// publishConn is the publishing connection with its timeout state.
func (b *Broker) publishConn() (*pubConn, error) {
	if _, err := b.connection(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pconn, nil
}

// channel returns the open confirm channel, opening one when there is
// none or the last one is dead. q.mu is held.
func (q *queuePub) channel() (*confirmChan, error) {
	if cc := q.cur; cc != nil {
		if !cc.isDead() {
			return cc, nil
		}
		q.cur = nil
	}
	if q.dropped {
		return nil, fmt.Errorf("rabbitmq: publish to %s: the topic was deleted or the broker closed", q.queue)
	}
	pc, err := q.b.publishConn()
	if err != nil {
		return nil, err
	}
	ch, err := pc.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open publish channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("rabbitmq: enable publisher confirms: %w", err)
	}
	cc := &confirmChan{q: q, pc: pc, ch: ch, wake: make(chan struct{}, 1)}
	// Buffered, and read by the collector all along: the connection's
	// reader blocks on a full return channel, and it delivers a return
	// before the matching ack.
	cc.ret = ch.NotifyReturn(make(chan amqp.Return, 256))
	cc.closed = ch.NotifyClose(make(chan *amqp.Error, 1))
	q.cur = cc
	go cc.collect()
	return cc, nil
}

func (q *queuePub) close() {
	q.mu.Lock()
	cc := q.cur
	q.cur, q.dropped = nil, true
	q.mu.Unlock()
	if cc != nil {
		cc.retire()
		go cc.ch.Close() //nolint:errcheck // a close handshake can hang on a blocked connection; ends with it at the latest
	}
}

// Send implements driverutil.Queue: it hands msgs[i] of p to the queue:
// it waits for a place in the window, then writes the message when no
// write is under way, else queues it for the writer. It reports false
// when ctx ended first (p failed the message then).
func (q *queuePub) Send(ctx context.Context, p *driverutil.Pending, i int, m *brokers.Message) bool {
	select {
	case q.window <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	o := outgoing{p: p, i: i, m: m}
	q.omu.Lock()
	if q.writing {
		// A write is under way: the writer takes this one after it.
		q.out = append(q.out, o)
		q.omu.Unlock()
		return true
	}
	q.writing = true
	q.omu.Unlock()
	// Nobody writes: write it here, and leave what was handed over
	// meanwhile to a writer goroutine.
	q.writeOne(o, true)
	q.omu.Lock()
	if len(q.out) == 0 {
		q.writing = false
		q.omu.Unlock()
		return true
	}
	q.omu.Unlock()
	go q.write()
	return true
}

// write writes what was handed over, oldest first, until nothing is
// left; send starts it when none runs.
func (q *queuePub) write() {
	var batch []outgoing
	for {
		q.omu.Lock()
		batch, q.out = q.out, batch[:0]
		if len(batch) == 0 {
			q.writing = false
			q.omu.Unlock()
			return
		}
		q.omu.Unlock()
		for k := range batch {
			q.writeOne(batch[k], false)
			batch[k] = outgoing{}
		}
	}
}

// writeOne writes o on the queue's confirm channel, opening one when
// needed; the channel's collector settles it. A message whose call has
// already ended (its ctx did) is not written. inCall says that the
// goroutine that called PublishAsync writes: a failure is then settled
// with SettleInCall, so that done never runs on it.
func (q *queuePub) writeOne(o outgoing, inCall bool) {
	if o.p.Done() {
		<-q.window
		return
	}
	m := o.m
	e := &entry{p: o.p, i: o.i, id: m.ID, deadline: time.Now().Add(q.b.confirmTimeout)}
	q.mu.Lock()
	var cc *confirmChan
	for {
		var err error
		if cc, err = q.channel(); err != nil {
			q.mu.Unlock()
			if inCall {
				o.p.SettleInCall(o.i, err)
			} else {
				o.p.Settle(o.i, err)
			}
			<-q.window
			return
		}
		if testHookChannel != nil {
			testHookChannel(cc)
		}
		if cc.push(e) {
			break
		}
		// The channel died since channel() looked; its collector may
		// have settled its last message and gone, so e goes to the
		// next channel.
	}
	h := amqp.Table{HeaderKey: m.Key, HeaderSent: strconv.FormatInt(time.Now().UnixNano(), 10)}
	for k, v := range m.Headers {
		h[k] = v
	}
	dc, err := cc.ch.PublishWithDeferredConfirm("", q.queue, q.b.mandatory, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  ContentType,
		MessageId:    m.ID,
		Headers:      h,
		Body:         m.Body,
	})
	if err != nil {
		err = fmt.Errorf("rabbitmq: publish %s to %s: %w", m.ID, q.queue, err)
	}
	cc.written(e, dc, err)
	q.mu.Unlock()
}

// testHookChannel, when set by a test, runs between finding a write's
// channel and handing it the message.
var testHookChannel func(*confirmChan)

// push hands e to the channel's collector; false if the channel is dead
// (its collector ends once what it holds is settled, so a message pushed
// then would never be).
func (cc *confirmChan) push(e *entry) bool {
	cc.mu.Lock()
	if cc.dead {
		cc.mu.Unlock()
		return false
	}
	cc.pending = append(cc.pending, e)
	cc.mu.Unlock()
	cc.signal()
	return true
}

// written records the outcome of e's write; a failed write retires the
// channel (it may be gone), so the next message opens another.
func (cc *confirmChan) written(e *entry, dc *amqp.DeferredConfirmation, err error) {
	cc.mu.Lock()
	e.written, e.dc, e.err = true, dc, err
	if err != nil {
		cc.dead = true
	}
	cc.mu.Unlock()
	cc.signal()
	if err != nil {
		go cc.ch.Close() //nolint:errcheck // see queuePub.close
	}
}

func (cc *confirmChan) signal() {
	select {
	case cc.wake <- struct{}{}:
	default:
	}
}

func (cc *confirmChan) isDead() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.dead
}

// retire stops hand-overs to the channel.
func (cc *confirmChan) retire() {
	cc.mu.Lock()
	cc.dead = true
	cc.mu.Unlock()
	cc.signal()
}

// collect settles the channel's messages in hand-over order (confirms
// come in publish order) until the channel is dead and nothing is left.
// It reads basic.returns all along, and it enforces the confirm timeout of
// the oldest message: past it, the publishing connection is closed.
func (cc *confirmChan) collect() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	ret, closed := cc.ret, cc.closed
	expiring := false // the connection is being closed: no timer any more
	for {
		cc.mu.Lock()
		var head *entry
		if len(cc.pending) > 0 {
			head = cc.pending[0]
		}
		dead := cc.dead
		var written bool
		var dc *amqp.DeferredConfirmation
		var werr error
		if head != nil {
			written, dc, werr = head.written, head.dc, head.err
		}
		cc.mu.Unlock()
		if head == nil && dead {
			return
		}
		if head != nil && written && werr != nil {
			cc.settle(head, false)
			continue
		}
		var confirmed <-chan struct{}
		var expired <-chan time.Time
		if head != nil {
			if written {
				confirmed = dc.Done()
			}
			if !expiring {
				timer.Reset(time.Until(head.deadline))
				expired = timer.C
			}
		}
		select {
		case <-cc.wake:
		case r, ok := <-ret:
			if !ok {
				ret = nil // the channel is gone; the confirms are closed too
				continue
			}
			cc.noteReturn(r)
		case _, ok := <-closed:
			if !ok {
				closed = nil
			}
			cc.retire()
		case <-confirmed:
			cc.drainReturns(ret)
			cc.settle(head, dc.Acked())
		case <-expired:
			cc.expire()
			expiring = true
		}
	}
}

// noteReturn marks the oldest unsettled message with r's id as returned.
func (cc *confirmChan) noteReturn(r amqp.Return) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, e := range cc.pending {
		if e.id == r.MessageId && e.returned == "" {
			e.returned = fmt.Sprintf("%d %s (queue %s missing?)", r.ReplyCode, r.ReplyText, r.RoutingKey)
			return
		}
	}
}

// drainReturns reads the returns already delivered: the connection's
// reader delivers a message's return before its ack.
func (cc *confirmChan) drainReturns(ret <-chan amqp.Return) {
	for ret != nil {
		select {
		case r, ok := <-ret:
			if !ok {
				return
			}
			cc.noteReturn(r)
		default:
			return
		}
	}
}

// settle pops the head e and settles it: confirmed, returned, nacked,
// timed out or failed to write.
func (cc *confirmChan) settle(e *entry, acked bool) {
	cc.mu.Lock()
	cc.pending[0] = nil
	cc.pending = cc.pending[1:]
	cc.mu.Unlock()
	topic := cc.q.queue
	var err error
	switch {
	case e.returned != "":
		err = fmt.Errorf("rabbitmq: publish %s to %s: unroutable, returned by the broker: %s", e.id, topic, e.returned)
	case e.err == nil && acked:
	case cc.pc.timedOut.Load() != nil:
		err = cc.q.b.timeoutError(e.id, topic, *cc.pc.timedOut.Load())
	case e.err != nil:
		err = e.err
	case cc.ch.IsClosed():
		err = fmt.Errorf("rabbitmq: publish %s to %s: the channel closed before the broker confirmed the message (connection lost?)", e.id, topic)
	default:
		err = fmt.Errorf("rabbitmq: publish %s to %s: broker nacked the message", e.id, topic)
		// A quorum queue nacks what it could not enqueue while its
		// leader was lost; the channel's view of the queue may stay
		// behind the new leader (measured: a channel went on being
		// nacked for seconds while a new one was confirmed), so the
		// next message of the queue opens a channel afresh.
		cc.retire()
		go cc.ch.Close() //nolint:errcheck // see queuePub.close
	}
	e.p.Settle(e.i, err)
	<-cc.q.window
}

// expire ends the publishing connection after a confirm timeout (with a
// deadline of its own): that ends a write stuck in the socket, which is
// where messages wait while an alarm blocks the connection, and every
// confirm wait with it. Its unconfirmed messages then fail naming the
// timeout, and the alarm when the broker had blocked the connection.
func (cc *confirmChan) expire() {
	reason := cc.q.b.blockedReason(cc.pc.conn)
	if cc.pc.timedOut.CompareAndSwap(nil, &reason) {
		go cc.pc.conn.CloseDeadline(time.Now().Add(time.Second)) //nolint:errcheck // the connection is being given up
	}
	cc.retire()
}

// timeoutError explains a message that was not confirmed in time, naming
// the resource alarm when the broker had blocked the connection.
func (b *Broker) timeoutError(id, queue, blocked string) error {
	if blocked != "" {
		return fmt.Errorf("rabbitmq: publish %s to %s: %w: %s (memory or disk alarm), no confirm within %s: the broker accepts no message while the alarm lasts; free memory or disk on the broker, or raise vm_memory_high_watermark / disk_free_limit (`rabbitmq-diagnostics alarms` lists them)",
			id, queue, ErrBlocked, blocked, b.confirmTimeout)
	}
	return fmt.Errorf("rabbitmq: publish %s to %s: no publisher confirm within %s (option %s): the broker is overloaded or unreachable", id, queue, b.confirmTimeout, OptConfirmTimeout)
}
