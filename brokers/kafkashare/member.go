package kafkashare

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

// member is one client of a subscription in the share group and its
// loop: poll, hand out, acknowledge, poll again.
type member struct {
	s  *subscription
	cl *kgo.Client
}

// run is the member's loop until the subscription ends. The one rule it
// keeps: PollRecords accepts every record of the previous poll that has
// no acknowledgement, so it is called only once every record handed out
// has its verdict; what has none (the subscription closed under a
// Handler, a dead-letter copy failed) is released first, here and before
// the client closes. A record is accepted only by settle, after the
// Handler returned Ack for it.
func (m *member) run() {
	s := m.s
	defer s.loops.Done()
	defer m.cl.MarkAcks(kgo.AckRelease)
	for s.ctx.Err() == nil {
		m.cl.MarkAcks(kgo.AckRelease) // a no-op unless the last poll's handling ended early
		fs := m.cl.PollRecords(s.ctx, s.Opts.Prefetch)
		if s.ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			s.Warn("kafka-share: fetch error (the client keeps retrying)", "topic", t, "partition", p, "err", err)
		})
		if s.Opts.SettleOnReceipt && !m.settleOnReceipt() {
			return
		}
		s.Received(fs.NumRecords())
		if !m.handle(fs) {
			return
		}
	}
}

// settleOnReceipt is the negative control SettleOnReceipt: every record
// of the poll is accepted, and the acknowledgements flushed to the
// broker, before any reaches a Handler. It reports false when the
// subscription crashed meanwhile.
func (m *member) settleOnReceipt() bool {
	s := m.s
	m.cl.MarkAcks(kgo.AckAccept)
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := m.cl.FlushAcks(ctx); err != nil && s.ctx.Err() == nil {
		s.Warn("kafka-share: accepting on receipt failed (SettleOnReceipt)", "topic", s.topic, "err", err)
	}
	return !s.Crashed()
}

// handle hands a poll's records to the Handler, each partition's on a
// goroutine of its own, in offset order in batches of up to MaxBatch,
// and returns once every record has its verdict (the next poll's fetch
// carries them to the broker); false when the member is to stop.
func (m *member) handle(fs kgo.Fetches) bool {
	var (
		wg      sync.WaitGroup
		stopped atomic.Bool
	)
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for recs := p.Records; len(recs) > 0 && !stopped.Load(); {
				n := min(len(recs), m.s.Opts.MaxBatch)
				if !m.batch(recs[:n]) {
					stopped.Store(true)
				}
				recs = recs[n:]
			}
		}()
	})
	wg.Wait()
	return !stopped.Load()
}

// batch runs the Handler on recs until each has a verdict: the
// Ack/Reject prefix before a Retry is settled at once; from the Retry on
// the records are released after the backoff, or, when one is on its
// last delivery (a release would archive it), handed to the Handler
// again in place.
func (m *member) batch(recs []*kgo.Record) bool {
	s := m.s
	ds := deliveries(recs)
	for {
		cut, out, err := s.HandleOnce(s.ctx, ds, m.settle(recs))
		switch out {
		case driverutil.Crashed:
			s.Crash()
			return false
		case driverutil.Unfinished:
			return false
		case driverutil.Failed:
			s.shutdown(s.b.Errorf("%s: %w", s.topic, err))
			return false
		}
		if cut == len(ds) {
			return true
		}
		ds, recs = ds[cut:], recs[cut:]
		if !ctxtime.Sleep(s.ctx, s.Opts.Backoff(max(ds[0].Attempt, ds[0].DeliveryCount))) {
			return false
		}
		if !lastDelivery(recs) {
			for _, r := range recs {
				r.Ack(kgo.AckRelease)
			}
			return true
		}
	}
}

// settle is the Settle of one Handler call on recs: ACCEPT for Ack; for
// Reject a confirmed copy to the dead-letter topic, then REJECT. After a
// Crash of the subscription (another member's Handler) nothing more is
// acknowledged. A failed copy leaves that record and the rest without a
// verdict: they are released.
func (m *member) settle(recs []*kgo.Record) driverutil.Settle {
	return func(_ []*brokers.Delivery, vs []brokers.Verdict) error {
		if m.s.Crashed() || m.s.Opts.SettleOnReceipt {
			return nil // nothing more acknowledged: crashed, or accepted on receipt (a Reject is not dead-lettered)
		}
		for i, v := range vs {
			r := recs[i]
			if v == brokers.Reject {
				if err := m.s.b.DeadLetter(m.s.ctx, r); err != nil {
					return err
				}
				r.Ack(kgo.AckReject)
				continue
			}
			r.Ack(kgo.AckAccept)
		}
		return nil
	}
}

// lastDelivery reports whether a record of recs is on the last delivery
// the group allows.
func lastDelivery(recs []*kgo.Record) bool {
	for _, r := range recs {
		if r.DeliveryCount() >= DeliveryLimit {
			return true
		}
	}
	return false
}

// deliveries are the Deliveries of recs; Shard is the partition.
func deliveries(recs []*kgo.Record) []*brokers.Delivery {
	dels := make([]brokers.Delivery, len(recs))
	ds := make([]*brokers.Delivery, len(recs))
	for i, r := range recs {
		d := &dels[i]
		d.Message, d.TransportID, d.Shard, d.BrokerTime = kafka.Message(r), kafka.TransportID(r), strconv.Itoa(int(r.Partition)), r.Timestamp
		d.DeliveryCount = int(r.DeliveryCount())
		d.Redelivered = d.DeliveryCount > 1
		ds[i] = d
	}
	return ds
}
