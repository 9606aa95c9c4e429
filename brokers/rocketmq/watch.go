package rocketmq

import (
	"context"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

// The client library fails a send whose connection broke only when the
// send's deadline passes (its response futures wait on the context, not
// on the connection): after a master was killed, every send in flight
// to it would wait out the send timeout (10 s) before being sent again to
// the new master. So the driver follows each broker group's master over
// a connection of its own, probed every watchEvery: when it breaks, or a
// probe is not answered within watchTimeout (a paused master), the sends
// in flight to that group are cancelled at once, and fail; the producer
// is replaced (producer.go) and the caller sends them again.

const (
	watchEvery   = time.Second
	watchTimeout = 3 * time.Second
)

// masterWatch follows one broker group's master.
type masterWatch struct {
	mu   sync.Mutex
	addr string        // the master it follows ("" while it has none)
	lost chan struct{} // closed when that master is lost; nil while none
}

// masterLost returns a channel closed when the master sends to group go
// to is lost, starting to follow the group on first use; nil while no
// master is followed (the send then waits out its own timeout).
func (b *Broker) masterLost(group string) <-chan struct{} {
	if group == "" || b.noWatch {
		return nil
	}
	v, loaded := b.watches.LoadOrStore(group, &masterWatch{})
	w := v.(*masterWatch)
	if !loaded {
		b.watching.Add(1)
		go func() {
			defer b.watching.Done()
			b.follow(group, w)
		}()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// follow finds group's master from the name server, connects to it and
// probes it until it is lost, then looks again, until the driver closes.
func (b *Broker) follow(group string, w *masterWatch) {
	ctx := b.watchCtx
	for ctx.Err() == nil {
		addr := b.masterOf(ctx, group)
		if addr == "" {
			if !ctxtime.Sleep(ctx, 200*time.Millisecond) {
				return
			}
			continue
		}
		c, err := dialConn(ctx, addr, nil)
		if err != nil {
			if !ctxtime.Sleep(ctx, 200*time.Millisecond) {
				return
			}
			continue
		}
		lost := make(chan struct{})
		w.mu.Lock()
		w.addr, w.lost = addr, lost
		w.mu.Unlock()
		b.probe(ctx, c)
		c.close()
		w.mu.Lock()
		w.addr, w.lost = "", nil
		w.mu.Unlock()
		close(lost)
	}
}

// probe asks the master for its configuration every watchEvery until the
// connection breaks, a probe goes unanswered for watchTimeout, or ctx
// ends.
func (b *Broker) probe(ctx context.Context, c *conn) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, watchTimeout)
		_, err := c.call(pctx, rmqGetBrokerConfig, signed(b.creds, nil, nil), nil)
		cancel()
		if err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		case <-t.C:
		}
	}
}

// masterOf asks the name servers for group's master address; "" when
// none has one registered.
func (b *Broker) masterOf(ctx context.Context, group string) string {
	for _, ns := range b.namesrv {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		ci, err := ClusterInfo(cctx, ns)
		cancel()
		if err != nil {
			continue
		}
		for _, g := range ci.BrokerAddrTable {
			if g.BrokerName == group && g.BrokerAddrs["0"] != "" {
				return g.BrokerAddrs["0"]
			}
		}
	}
	return ""
}
