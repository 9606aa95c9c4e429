package kafkashare

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/brokers/kafka"
)

// DefaultGroup is used when Subscribe is given an empty group.
const DefaultGroup = "inboxbench"

// subscription is a share-group consumer: its member, a client in the
// group with a loop of its own (member.go).
type subscription struct {
	driverutil.Sub // its end is shutdown
	b              *Broker
	topic, group   string

	ctx    context.Context // cancelled by Close and Crash: stops polling and handlers
	cancel context.CancelFunc

	m         *member
	loops     sync.WaitGroup
	closeOnce sync.Once
}

// Subscribe implements brokers.Broker: it sets the group's configuration
// (Broker.groupConfigs), then starts the subscription's member.
func (b *Broker) Subscribe(ctx context.Context, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) (brokers.Subscription, error) {
	if group == "" {
		group = DefaultGroup
	}
	if err := b.CheckTopic(ctx, topic); err != nil {
		return nil, err
	}
	if err := b.ConfigureGroup(ctx, group); err != nil {
		return nil, err
	}
	s := &subscription{b: b, topic: topic, group: group}
	s.Init(opts, h, s.shutdown)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	m, err := s.newMember()
	if err != nil {
		s.cancel()
		return nil, b.Errorf("subscribe %s as share group %s: %w", topic, group, err)
	}
	s.m = m
	if !b.subs.Add(s) {
		s.cancel()
		kafka.CloseClient(m.cl)
		return nil, b.Errorf("subscribe: broker is closed")
	}
	s.loops.Add(1)
	go m.run()
	return s, nil
}

// newMember creates a client in the share group. A fetch waits at most
// 250 ms and acquires at most Prefetch records (strictly, and only when
// the member polls: no fetch runs ahead), so a subscription holds at
// most that many under lock: every record acquired and not yet handled
// is one a later version of its aggregate may overtake. The callback
// reports acknowledgements the broker refused (a lock that ran out: the
// record was or will be delivered again).
func (s *subscription) newMember() (*member, error) {
	cl, err := kgo.NewClient(append(s.b.ClientOptions(),
		kgo.ShareGroup(s.group),
		kgo.ConsumeTopics(s.topic),
		kgo.ShareMaxRecords(int32(s.Opts.Prefetch)),
		kgo.ShareMaxRecordsStrict(),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.ShareAckCallback(s.acked),
	)...)
	if err != nil {
		return nil, err
	}
	return &member{s: s, cl: cl}, nil
}

// acked logs acknowledgements the broker refused, once per 10 s: the
// records are delivered again (at-least-once), which the inbox decides.
func (s *subscription) acked(_ *kgo.Client, rs kgo.ShareAckResults) {
	if err := rs.Error(); err != nil && s.ctx.Err() == nil {
		s.Warn("kafka-share: the broker refused acknowledgements; those records are delivered again", "topic", s.topic, "group", s.group, "err", err)
	}
}

// shutdown ends the subscription once: stop the member (a running
// Handler finishes and, unless the subscription crashed, its verdicts are
// acknowledged; whatever has none is released), then close its client
// (which sends the last acknowledgements and leaves the group).
func (s *subscription) shutdown(cause error) {
	s.closeOnce.Do(func() {
		go func() {
			s.cancel()
			s.loops.Wait()
			if !kafka.CloseClient(s.m.cl) {
				cause = errors.Join(cause, s.b.Errorf("the consumer of %s did not close within 15s (unreachable cluster?)", s.topic))
			}
			s.b.subs.Remove(s)
			s.Finish(cause)
		}()
	})
}
