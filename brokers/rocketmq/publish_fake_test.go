package rocketmq

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// fakeSend is one SendSync the fake producer holds until the test answers.
type fakeSend struct {
	queue int
	ids   []string
	reply chan error
}

// fakeProducer hands every send to the test, which confirms them late and
// in any order it likes.
type fakeProducer struct {
	sends    chan *fakeSend
	inflight [8]atomic.Int32 // per queue
	overlap  atomic.Bool     // two sends of one queue at once
}

func (f *fakeProducer) SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	q := msgs[0].Queue.QueueId
	if f.inflight[q].Add(1) > 1 {
		f.overlap.Store(true)
	}
	defer f.inflight[q].Add(-1)
	s := &fakeSend{queue: q, reply: make(chan error, 1)}
	for _, m := range msgs {
		s.ids = append(s.ids, m.GetProperty(propID))
	}
	f.sends <- s
	select {
	case err := <-s.reply:
		if err != nil {
			return nil, err
		}
		return &primitive.SendResult{Status: primitive.SendOK}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeProducer) Shutdown() error { return nil }

// fakeProducerBroker is a driver whose producer is f, publishing to topic "t" of
// two queues, with the given window per queue.
func fakeProducerBroker(t *testing.T, window int) (*Broker, *fakeProducer) {
	b, err := New(context.Background(), config.Default(), brokers.Options{OptPublishWindow: strconv.Itoa(window)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProducer{sends: make(chan *fakeSend, 64)}
	b.prodOnce.Do(func() { b.prod = f })
	mqs := []*primitive.MessageQueue{{Topic: "t", BrokerName: "a", QueueId: 0}, {Topic: "t", BrokerName: "a", QueueId: 1}}
	b.topic("t").route.Store(&publishRoute{mqs: mqs, masters: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = b.Close() })
	return b, f
}

// keyFor returns a key that hashes onto queue q of 2.
func keyFor(q int) string {
	for i := 0; ; i++ {
		if k := "k" + strconv.Itoa(i); driverutil.Shard(k, 2) == q {
			return k
		}
	}
}

func (f *fakeProducer) next(t *testing.T) *fakeSend {
	t.Helper()
	select {
	case s := <-f.sends:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no send within 10s")
		return nil
	}
}

// A queue has one send in flight; what is handed over meanwhile goes in
// the next send, in order, and the window bounds it; confirms of the two
// queues come out of order and each call's done comes when its own
// messages are settled; a failed send fails only its messages.
func TestQueueSenderWithLateOutOfOrderConfirms(t *testing.T) {
	b, f := fakeProducerBroker(t, 3)
	k0, k1 := keyFor(0), keyFor(1)
	msg := func(key string, i int) brokers.Message {
		return brokers.Message{Key: key, ID: key + "-" + strconv.Itoa(i), Body: []byte("x")}
	}
	var mu sync.Mutex
	results := map[string][]error{}
	var handed atomic.Int32
	publish := func(name string, msgs ...brokers.Message) {
		b.PublishAsync(context.Background(), "t", msgs, func(errs []error) {
			mu.Lock()
			results[name] = errs
			mu.Unlock()
		})
		handed.Add(int32(len(msgs)))
	}
	result := func(name string) ([]error, bool) {
		mu.Lock()
		defer mu.Unlock()
		errs, ok := results[name]
		return errs, ok
	}
	waitResult := func(name string) []error {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if errs, ok := result(name); ok {
				return errs
			}
		}
		t.Fatalf("no done for %s", name)
		return nil
	}

	publish("a", msg(k0, 1))
	first := f.next(t) // queue 0's first send, held
	publish("b", msg(k1, 1))
	other := f.next(t) // queue 1's, held too

	// Queue 0 has a send in flight (1 of its window of 3): two more fit,
	// the third must wait for a confirm.
	go func() {
		publish("c", msg(k0, 2), msg(k0, 3))
		publish("d", msg(k0, 4))
	}()
	for deadline := time.Now().Add(10 * time.Second); handed.Load() < 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages handed over, want 4", handed.Load())
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := handed.Load(); n != 4 {
		t.Fatalf("%d messages handed over with queue 0's window of 3 full, want 4", n)
	}
	select {
	case s := <-f.sends:
		t.Fatalf("queue %d got a second send %v while its first was in flight", s.queue, s.ids)
	default:
	}

	other.reply <- nil // queue 1 confirms first
	if errs := waitResult("b"); brokers.FirstError(errs) != nil {
		t.Fatal(errs)
	}
	if _, ok := result("a"); ok {
		t.Fatal("call a is done before its message was confirmed")
	}
	first.reply <- errors.New("broker said no")
	if errs := waitResult("a"); errs[0] == nil {
		t.Fatal("call a's failed send was reported confirmed")
	}
	// What was buffered meanwhile goes next, in order, as few sends as
	// the hand-overs allow (d's message may join c's or follow it).
	var sent []string
	var pending *fakeSend
	for len(sent) < 3 {
		s := f.next(t)
		sent = append(sent, s.ids...)
		if len(sent) < 3 {
			s.reply <- nil
		} else {
			pending = s
		}
	}
	if want := []string{k0 + "-2", k0 + "-3", k0 + "-4"}; !slices.Equal(sent, want) {
		t.Fatalf("queue 0 sent %v after the failed send, want %v", sent, want)
	}
	if len(pending.ids) == 1 { // c's send was confirmed
		if errs := waitResult("c"); brokers.FirstError(errs) != nil {
			t.Fatal(errs)
		}
	}
	pending.reply <- &RemotingError{Code: resSystemBusy, Remark: "busy"} // refused: sent again, before anything later
	again := f.next(t)
	if !slices.Equal(again.ids, pending.ids) {
		t.Fatalf("after a busy refusal queue 0 sent %v, want %v again", again.ids, pending.ids)
	}
	go publish("e", msg(k0, 5)) // waits for room when c and d went in one send
	again.reply <- nil
	last := f.next(t)
	if last.ids[0] != k0+"-5" {
		t.Fatalf("queue 0 sent %v after %s-4", last.ids, k0)
	}
	last.reply <- nil
	for _, name := range []string{"c", "d", "e"} {
		if errs := waitResult(name); brokers.FirstError(errs) != nil {
			t.Fatal(name, errs)
		}
	}
	if f.overlap.Load() {
		t.Fatal("a queue had two sends in flight")
	}
}

// Close fails what the senders hold and returns after every done.
func TestQueueSenderCloseFailsHeld(t *testing.T) {
	b, f := fakeProducerBroker(t, 8)
	var dones atomic.Int32
	var failed atomic.Int32
	for i := range 5 {
		b.PublishAsync(context.Background(), "t", []brokers.Message{{Key: keyFor(0), ID: strconv.Itoa(i)}}, func(errs []error) {
			if errs[0] != nil {
				failed.Add(1)
			}
			dones.Add(1)
		})
	}
	f.next(t) // held for ever
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if dones.Load() != 5 || failed.Load() != 5 {
		t.Fatalf("after Close: %d dones, %d failed, want 5 and 5", dones.Load(), failed.Load())
	}
}
