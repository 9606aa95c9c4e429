package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// streamPub publishes to one stream: Send queues a message once a window
// slot is free, and one goroutine sends whatever is queued as one
// pipeline of XADDs, one pipeline at a time, settling each message from
// its reply and then freeing its slot.
type streamPub struct {
	b      *Broker
	stream string
	slots  chan struct{} // a token per message handed over and not settled
	wake   chan struct{}
	done   chan struct{} // closed when the sender returned

	mu     sync.Mutex
	queue  []pubItem
	closed bool
}

// pubItem is message i of call p.
type pubItem struct {
	p *driverutil.Pending
	i int
	m *brokers.Message
}

func newStreamPub(b *Broker, stream string) *streamPub {
	q := &streamPub{b: b, stream: stream, slots: make(chan struct{}, b.window), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// Send implements driverutil.Queue.
func (q *streamPub) Send(ctx context.Context, p *driverutil.Pending, i int, m *brokers.Message) bool {
	select {
	case q.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		<-q.slots
		p.SettleInCall(i, fmt.Errorf("redis: publish %s to %s: the publisher is closed", m.ID, q.stream))
		return true
	}
	q.queue = append(q.queue, pubItem{p, i, m})
	select { // under mu: close closes wake under it
	case q.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
	q.mu.Unlock()
	return true
}

// run sends the queue until close.
func (q *streamPub) run() {
	defer close(q.done)
	for range q.wake {
		for {
			q.mu.Lock()
			batch := q.queue
			q.queue = nil
			q.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			q.send(batch)
		}
	}
}

// send writes batch as one pipeline and settles each message.
func (q *streamPub) send(batch []pubItem) {
	ctx := context.Background() // a call's ctx ending fails its messages by itself (Pending)
	live := batch[:0:0]
	for _, it := range batch {
		if it.p.Done() {
			<-q.slots // the call gave up: nothing to send
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	cmds, _ := q.b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, it := range live {
			p.XAdd(ctx, &goredis.XAddArgs{Stream: q.stream, NoMkStream: true, Values: fields(it.m)})
		}
		return nil
	})
	for k, it := range live {
		var err error
		if k >= len(cmds) {
			err = errors.New("no reply")
		} else {
			err = cmds[k].Err()
		}
		switch {
		case errors.Is(err, goredis.Nil):
			err = fmt.Errorf("redis: publish %s: stream %s does not exist (the topic was deleted, or never set up)", it.m.ID, q.stream)
		case err != nil:
			err = q.b.errorf("publish %s to %s: %w", it.m.ID, q.stream, err)
		}
		it.p.Settle(it.i, err)
		<-q.slots
	}
}

// fields are m as a stream entry's field-value pairs.
func fields(m *brokers.Message) []any {
	out := make([]any, 0, 6+2*len(m.Headers))
	out = append(out, FieldID, m.ID, FieldKey, m.Key, FieldBody, m.Body)
	for k, v := range m.Headers {
		out = append(out, HeaderField+k, v)
	}
	return out
}

// close fails what is queued and stops the sender once it finished the
// pipeline under way.
func (q *streamPub) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	batch := q.queue
	q.queue = nil
	close(q.wake)
	q.mu.Unlock()
	for _, it := range batch {
		it.p.Settle(it.i, fmt.Errorf("redis: publish %s to %s: the broker is closed", it.m.ID, q.stream))
		<-q.slots
	}
	<-q.done
}
