// Package brokertest is the driver conformance suite: one set of tests run
// against every broker driver, gated by the driver's Capabilities (after
// watermill's shared pub/sub tests), and a raw transport benchmark.
//
// A driver package calls it from a _test.go, opening the driver with an
// Opener (OnStack, InProcess), whose New the benchmarks take too (Raw1KiB,
// Rate1KiB, Drain1KiB); the tests on the secure and the replicated stack
// (Refusals, ReplicatedDriver) open the driver by its registry name:
//
//	var driver = brokertest.OnStack(kafka.Name, testenv.Kafka)
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
//	}
//
// Every topic and group name is unique per test (UniqueName), so the suite
// can run repeatedly against persistent servers. Every wait is bounded and a
// timeout fails with the broker's name and the missing/unexpected/
// out-of-order ids, so a broker that stops mid-test produces an error, not
// a hang.
package brokertest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
)

// NewBroker creates a fresh driver instance for one test and arranges for
// it to be closed with tb.Cleanup.
type NewBroker func(tb testing.TB) brokers.Broker

// Timeouts used by the suite. They are generous for slow CI machines but
// finite: a dead broker fails the test within them.
const (
	setupTimeout   = 60 * time.Second
	publishTimeout = 60 * time.Second
	waitTimeout    = 60 * time.Second
)

// Run runs the conformance tests as subtests of t.
func Run(t *testing.T, newBroker NewBroker, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, newBroker NewBroker)
	}{
		{"PublishConsumeAll", testPublishConsumeAll},
		{"PublisherRetryKeepsID", testPublisherRetryKeepsID},
		{"CrashRedelivers", testCrashRedelivers},
		{"RestartMidStream", testRestartMidStream},
		{"RetryNotLost", testRetryNotLost},
		{"RejectDeadLetters", testRejectDeadLetters},
		{"PerKeyOrder10k", testPerKeyOrder},
		{"BatchDelivery", testBatchDelivery},
		{"BatchCrash", testBatchCrash},
		{"CrashWhileStarting", testCrashWhileStarting},
		{"CrashWithBacklog", testCrashWithBacklog},
		{"SettleOnReceiptLosesBacklog", testSettleOnReceipt},
		{"Capabilities", testCapabilities},
		{"AsyncManyInFlight", testAsyncManyInFlight},
		{"AsyncFailureIsolated", testAsyncFailureIsolated},
		{"AsyncCancel", testAsyncCancel},
		{"AsyncClose", testAsyncClose},
		{"AsyncWindow", func(t *testing.T, nb NewBroker) { testAsyncWindow(t, nb, o) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newBroker) })
	}
}

// Topic creates a unique topic of shards shards on b, deleted when the
// test ends (when the driver can delete topics).
func Topic(t *testing.T, b brokers.Broker, shards int) string {
	t.Helper()
	topic := UniqueName(t, "ib")
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := b.Setup(ctx, topic, shards); err != nil {
		t.Fatalf("%s: setup %s: %v", b.Name(), topic, err)
	}
	cleanupTopic(t, b, topic)
	return topic
}

// SetupKeepsShards checks Setup's contract for a driver that keeps a
// topic's shard count: a second Setup of a topic with as many shards
// succeeds, one with fewer fails.
func SetupKeepsShards(t *testing.T, b brokers.Broker) {
	t.Helper()
	topic := Topic(t, b, 3)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := b.Setup(ctx, topic, 3); err != nil {
		t.Fatalf("%s: Setup is not idempotent: %v", b.Name(), err)
	}
	if err := b.Setup(ctx, topic, 2); err == nil {
		t.Fatalf("%s: Setup with fewer shards than exist succeeded", b.Name())
	}
}

// cleanupTopic deletes topic after the test (registered before the
// subscriptions' cleanups, so it runs after them) when the driver can:
// persistent servers must not fill up with test queues.
func cleanupTopic(tb testing.TB, b brokers.Broker, topic string) {
	d, ok := b.(brokers.TopicDeleter)
	if !ok {
		return
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.DeleteTopic(ctx, topic); err != nil {
			tb.Logf("%s: clean up topic %s: %v", b.Name(), topic, err)
		}
	})
}

// subscribe starts a subscription and closes it at the end of the test.
func subscribe(t *testing.T, b brokers.Broker, topic, group string, opts brokers.SubscribeOptions, h brokers.Handler) brokers.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	s, err := b.Subscribe(ctx, topic, group, opts, h)
	if err != nil {
		t.Fatalf("%s: subscribe %s as %s: %v", b.Name(), topic, group, err)
	}
	t.Cleanup(func() { closeSub(t, b, s) })
	return s
}

func closeSub(t *testing.T, b brokers.Broker, s brokers.Subscription) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.Close() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("%s: close subscription: %v", b.Name(), err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s: closing a subscription took more than 30s", b.Name())
	}
}

// waitDone waits for a subscription to end.
func waitDone(t *testing.T, b brokers.Broker, s brokers.Subscription, timeout time.Duration) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(timeout):
		t.Fatalf("%s: subscription did not end within %v", b.Name(), timeout)
	}
}

// everything published is consumed, with the fields a delivery promises;
// half is published before the group first subscribes (a new group starts
// at the beginning), half after.
func testPublishConsumeAll(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	topic := Topic(t, b, 4)
	msgs := Events(t, UniqueName(t, "e"), 16, 50, 0)
	c := NewCollector(b.Name(), msgs)
	start := time.Now()
	Publish(t, b, topic, msgs[:400], publishTimeout)
	sub := subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	Publish(t, b, topic, msgs[400:], publishTimeout)
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)

	d := c.Deliveries(msgs[0].ID)[0]
	if d.Headers["test-header"] != msgs[0].Headers["test-header"] {
		t.Errorf("%s: headers did not round-trip: published %v, delivered %v", b.Name(), msgs[0].Headers, d.Headers)
	}
	if d.BrokerTime.Before(start.Add(-time.Minute)) || d.BrokerTime.After(time.Now().Add(time.Minute)) {
		t.Errorf("%s: BrokerTime %v is not near the publish time %v", b.Name(), d.BrokerTime, start)
	}
	// The driver counts an ack after the handler returned: wait for it.
	c.WaitFor(t, "Stats().Acked to count every ack", waitTimeout, func() bool { return sub.Stats().Acked >= int64(len(msgs)) })
	if st := sub.Stats(); st.Deliveries < st.Acked || st.DeadLettered != 0 || st.Crashed != 0 {
		t.Errorf("%s: stats %+v after %d acked messages", b.Name(), st, len(msgs))
	}
}

// a publisher that retries (its confirm was lost) sends the same event
// again: both copies carry the same event id, with new transport ids. A
// broker that deduplicates by id (Capabilities.BrokerDedup) confirms the
// retry as ErrDeduplicated and delivers the event once.
func testPublisherRetryKeepsID(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	topic := Topic(t, b, 2)
	prefix := UniqueName(t, "e")
	first := Event(t, prefix, 0, 1, 0, 0)
	retry := Event(t, prefix, 0, 1, 1, 0)
	c := NewCollector(b.Name(), []brokers.Message{first})
	Publish(t, b, topic, []brokers.Message{first}, publishTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	errs := b.Publish(ctx, topic, []brokers.Message{retry})
	subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	if window := b.Capabilities().BrokerDedup; window > 0 {
		if !errors.Is(errs[0], brokers.ErrDeduplicated) {
			t.Fatalf("%s: claims BrokerDedup (%s) but a retry right after the first publish returned %v, want ErrDeduplicated", b.Name(), window, errs[0])
		}
		c.WaitAll(t, waitTimeout)
		time.Sleep(time.Second)
		if ds := c.Deliveries(first.ID); len(ds) != 1 {
			t.Errorf("%s: claims BrokerDedup but delivered %s %d times", b.Name(), first.ID, len(ds))
		}
		return
	}
	if errs[0] != nil {
		t.Fatalf("%s: publish the retry: %v", b.Name(), errs[0])
	}
	c.WaitFor(t, "both copies of "+first.ID, waitTimeout, func() bool { return len(c.Deliveries(first.ID)) >= 2 })
	ds := c.Deliveries(first.ID)
	attempts := map[int]bool{}
	for _, d := range ds {
		ev, err := envelope.Unmarshal(d.Body)
		if err != nil {
			t.Fatalf("%s: %v", b.Name(), err)
		}
		if d.ID != first.ID || ev.ID != first.ID {
			t.Errorf("%s: a publisher retry changed the event id: delivery ID %q, envelope id %q, want %q", b.Name(), d.ID, ev.ID, first.ID)
		}
		attempts[ev.Attempt] = true
	}
	if !attempts[0] || !attempts[1] {
		t.Errorf("%s: want the original (attempt 0) and the retry (attempt 1), got attempts %v", b.Name(), attempts)
	}
	if ds[0].TransportID == ds[1].TransportID {
		t.Errorf("%s: two publishes share transport id %q", b.Name(), ds[0].TransportID)
	}
}

// the article's duplicate experiment: the handler "commits" and then the
// process dies before the ack; the same event comes back.
func testCrashRedelivers(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	caps := b.Capabilities()
	topic := Topic(t, b, 2)
	group := UniqueName(t, "g")
	msgs := Events(t, UniqueName(t, "e"), 4, 5, 0)
	target := msgs[6].ID // v2 of key 2: not the first message of its shard
	c := NewCollector(b.Name(), msgs)
	var crashed atomic.Bool
	c.Decide = func(d *brokers.Delivery, _ *envelope.Event) brokers.Verdict {
		if d.ID == target && crashed.CompareAndSwap(false, true) {
			return brokers.Crash
		}
		return brokers.Ack
	}
	Publish(t, b, topic, msgs, publishTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	first, err := b.Subscribe(ctx, topic, group, brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	if err != nil {
		t.Fatalf("%s: subscribe: %v", b.Name(), err)
	}
	waitDone(t, b, first, waitTimeout)
	if !errors.Is(first.Err(), brokers.ErrCrashed) {
		t.Fatalf("%s: after a Crash verdict Err() = %v, want ErrCrashed", b.Name(), first.Err())
	}
	if st := first.Stats(); st.Crashed != 1 {
		t.Errorf("%s: Stats().Crashed = %d, want 1", b.Name(), st.Crashed)
	}
	if err := first.Close(); err != nil {
		t.Errorf("%s: Close after crash: %v", b.Name(), err)
	}

	subscribe(t, b, topic, group, brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	c.WaitFor(t, "redelivery of "+target, waitTimeout, func() bool { return len(c.Deliveries(target)) >= 2 })
	c.WaitAll(t, waitTimeout)
	c.Check(t, caps.PerKeyOrder)

	ds := c.Deliveries(target)
	again := ds[len(ds)-1]
	if again.ID != target || string(again.Body) != string(ds[0].Body) {
		t.Errorf("%s: redelivery is not the same event: ID %q body %q, first ID %q body %q", b.Name(), again.ID, again.Body, ds[0].ID, ds[0].Body)
	}
	if caps.RedeliveryFlag && !again.Redelivered {
		t.Errorf("%s: claims RedeliveryFlag but the redelivery of %s has Redelivered=false (%+v)", b.Name(), target, again)
	}
	if caps.DeliveryCount && again.DeliveryCount < 2 {
		t.Errorf("%s: claims DeliveryCount but the redelivery of %s has DeliveryCount=%d", b.Name(), target, again.DeliveryCount)
	}
	t.Logf("%s: redelivered %s: Redelivered=%v DeliveryCount=%d TransportID %s (first %s)", b.Name(), target, again.Redelivered, again.DeliveryCount, again.TransportID, ds[0].TransportID)
}

// a consumer closed mid-stream and started again loses nothing and, where
// claimed, keeps per-key order (redeliveries of acked ids are tolerated).
func testRestartMidStream(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	topic := Topic(t, b, 4)
	group := UniqueName(t, "g")
	msgs := Events(t, UniqueName(t, "e"), 16, 100, 0)
	c := NewCollector(b.Name(), msgs)
	Publish(t, b, topic, msgs, publishTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	first, err := b.Subscribe(ctx, topic, group, brokers.SubscribeOptions{Prefetch: 16}, brokers.PerDelivery(c.Handle))
	if err != nil {
		t.Fatalf("%s: subscribe: %v", b.Name(), err)
	}
	c.WaitFor(t, "a quarter of the events", waitTimeout, func() bool { return c.AckedCount() >= len(msgs)/4 })
	closeSub(t, b, first)
	if err := first.Err(); err != nil {
		t.Errorf("%s: Err() after a clean Close = %v, want nil", b.Name(), err)
	}
	t.Logf("%s: restarted after %d of %d", b.Name(), c.AckedCount(), len(msgs))
	subscribe(t, b, topic, group, brokers.SubscribeOptions{Prefetch: 16}, brokers.PerDelivery(c.Handle))
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)
}

// Retry verdicts bring the message back, never lose it, and (with
// PerKeyOrder) never let a later message of the key overtake it (the
// proof against, e.g., rocketmq-client-go's orderly ConsumeRetryLater,
// which drops the message).
func testRetryNotLost(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	topic := Topic(t, b, 2)
	msgs := Events(t, UniqueName(t, "e"), 4, 10, 0)
	c := NewCollector(b.Name(), msgs)
	const retries = 2
	retried := map[string]bool{}
	for i, m := range msgs {
		if i%5 == 2 {
			retried[m.ID] = true
		}
	}
	c.Decide = func(d *brokers.Delivery, _ *envelope.Event) brokers.Verdict {
		if retried[d.ID] && c.Calls(d.ID) <= retries {
			return brokers.Retry
		}
		return brokers.Ack
	}
	Publish(t, b, topic, msgs, publishTimeout)
	sub := subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond}, brokers.PerDelivery(c.Handle))
	c.WaitAll(t, waitTimeout)
	c.Check(t, b.Capabilities().PerKeyOrder)
	for id := range retried {
		if n := c.Calls(id); n < retries+1 {
			t.Errorf("%s: %s was retried %d times but handled only %d times", b.Name(), id, retries, n)
		}
	}
	if st := sub.Stats(); st.Retried < int64(retries*len(retried)) {
		t.Errorf("%s: Stats().Retried = %d, want at least %d", b.Name(), st.Retried, retries*len(retried))
	}
}

// Reject moves poison messages to the driver's dead-letter destination and
// counts them; nothing is dropped silently and the rest flows on.
func testRejectDeadLetters(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	if !b.Capabilities().DeadLetter {
		t.Skipf("%s does not claim DeadLetter", b.Name())
	}
	dl, ok := b.(brokers.DeadLetterReader)
	if !ok {
		t.Fatalf("%s claims DeadLetter but does not implement brokers.DeadLetterReader", b.Name())
	}
	topic := Topic(t, b, 2)
	msgs := Events(t, UniqueName(t, "e"), 4, 5, 0)
	poison := map[string]bool{}
	var good []brokers.Message
	for i, m := range msgs {
		if i%4 == 1 {
			poison[m.ID] = true
		} else {
			good = append(good, m)
		}
	}
	c := NewCollector(b.Name(), good)
	c.Decide = func(d *brokers.Delivery, _ *envelope.Event) brokers.Verdict {
		if poison[d.ID] {
			return brokers.Reject
		}
		return brokers.Ack
	}
	Publish(t, b, topic, msgs, publishTimeout)
	sub := subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	c.WaitAll(t, waitTimeout)
	c.WaitFor(t, "the dead-letter counter", waitTimeout, func() bool { return sub.Stats().DeadLettered >= int64(len(poison)) })
	c.Check(t, false)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	got, err := dl.DeadLetters(ctx, topic, len(poison))
	if err != nil {
		t.Fatalf("%s: read dead letters: %v (got %d of %d)", b.Name(), err, len(got), len(poison))
	}
	seen := map[string]bool{}
	var extra []string
	for _, m := range got {
		if !poison[m.ID] {
			extra = append(extra, m.ID)
		}
		if m.Key == "" || m.Headers["test-header"] == "" {
			t.Errorf("%s: dead letter %s lost its key or headers: %+v", b.Name(), m.ID, m)
		}
		seen[m.ID] = true
	}
	var missing []string
	for id := range poison {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%s: dead-letter destination: missing %s; unexpected %s", b.Name(), list(missing), list(extra))
	}
	if st := sub.Stats(); st.DeadLettered != int64(len(poison)) {
		t.Errorf("%s: Stats().DeadLettered = %d, want %d", b.Name(), st.DeadLettered, len(poison))
	}
}

// 10,000 events over 16 keys arrive per key in order, never two handler
// calls of one key at once.
func testPerKeyOrder(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	if !b.Capabilities().PerKeyOrder {
		t.Skipf("%s does not claim PerKeyOrder", b.Name())
	}
	topic := Topic(t, b, 8)
	msgs := Events(t, UniqueName(t, "e"), 16, 625, 0)
	c := NewCollector(b.Name(), msgs)
	subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	Publish(t, b, topic, msgs, publishTimeout)
	c.WaitAll(t, 90*time.Second)
	c.Check(t, true)
}

// capabilities are internally consistent.
func testCapabilities(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	caps := b.Capabilities()
	if b.Name() == "" || caps.Description == "" {
		t.Errorf("driver must have a name and a description: %q %+v", b.Name(), caps)
	}
	if _, ok := b.(brokers.DeadLetterReader); caps.DeadLetter && !ok {
		t.Errorf("%s claims DeadLetter without implementing DeadLetterReader", b.Name())
	}
	t.Logf("%s: %+v", b.Name(), caps)
}
