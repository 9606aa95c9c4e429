package rabbitmq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// A channel that dies between the write finding it and handing it the
// message (a node lost, a nack) must not keep the message: its collector
// may already have settled its last message and ended, and a message
// handed to it then would never be confirmed nor failed (seen once in a
// leader-kill failover: one message of 4,600 unsettled three minutes
// later). The hook closes every channel at exactly that point; every
// message must still be settled, here confirmed on a channel opened
// afresh.
func TestPublishSurvivesChannelDyingBeforeHandOver(t *testing.T) {
	cfg := core.Require(t, core.RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := fmt.Sprintf("ib-hook-%d", time.Now().UnixNano())
	if err := b.Setup(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	defer b.DeleteTopic(context.Background(), topic) //nolint:errcheck
	closed := 0
	testHookChannel = func(cc *confirmChan) {
		if closed >= 3 {
			return
		}
		closed++
		// As the broker closing it would: the collector sees the
		// close, retires the channel and, holding nothing, ends.
		if err := cc.ch.Close(); err != nil {
			t.Errorf("close the channel: %v", err)
		}
		for deadline := time.Now().Add(5 * time.Second); !cc.isDead(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the collector did not see its channel close")
			}
		}
	}
	defer func() { testHookChannel = nil }()
	for i := range 5 {
		m := brokers.Message{Key: "k", ID: fmt.Sprintf("m%d", i), Body: []byte(`{}`)}
		done := make(chan error, 1)
		b.PublishAsync(ctx, topic, []brokers.Message{m}, func(errs []error) { done <- errs[0] })
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("publish %s: %v", m.ID, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("publish %s: neither confirmed nor failed after 30 s (its channel was closed %d times before the hand-over)", m.ID, closed)
		}
	}
	if closed != 3 {
		t.Errorf("the hook closed %d channels, want 3", closed)
	}
}
