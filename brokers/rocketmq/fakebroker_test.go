package rocketmq

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
)

// lockMode is how the fake broker answers LOCK_BATCH_MQ.
type lockMode int

const (
	lockGrant  lockMode = iota // the queue is locked for the caller
	lockRefuse                 // answered without the queue: another member holds it
	lockFail                   // an error response (the broker refuses the request)
	lockSilent                 // no answer at all (a broker that stopped responding)
)

// fakeBroker is a name server and a master broker on one loopback
// listener, speaking enough of the remoting protocol for the driver's
// consumer on a topic of one queue: route, heartbeat, member list, lock,
// unlock, offsets, and pulls of the messages it holds (a pull past the
// last one is held 100 ms and answered "not found", as a long poll).
type fakeBroker struct {
	ln    net.Listener
	addr  string
	topic string
	wg    sync.WaitGroup

	mu        sync.Mutex
	msgs      [][]byte // stored messages; the offset is the index
	committed int64    // -1: the group never committed
	members   []string
	mode      lockMode
	granted   time.Time // arrival of the last request that was granted the lock
	refused   time.Time // arrival of the first lock request of the current mode not granted
	pulls     []time.Time
	conns     []net.Conn
}

func newFakeBroker(t *testing.T, topic string, bodies ...string) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{ln: ln, addr: ln.Addr().String(), topic: topic, committed: -1}
	for i, b := range bodies {
		fb.msgs = append(fb.msgs, storedMessage(topic, int64(i), b))
	}
	fb.wg.Add(1)
	go func() {
		defer fb.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fb.mu.Lock()
			fb.conns = append(fb.conns, c)
			fb.mu.Unlock()
			fb.wg.Add(1)
			go func() {
				defer fb.wg.Done()
				fb.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		fb.mu.Lock()
		for _, c := range fb.conns {
			c.Close()
		}
		fb.mu.Unlock()
		fb.wg.Wait()
	})
	return fb
}

func (fb *fakeBroker) setMode(m lockMode) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.mode, fb.refused = m, time.Time{}
}

// lockTimes returns when the last granted lock request arrived and when
// the first one of the current mode not granted did (zero if none yet).
func (fb *fakeBroker) lockTimes() (granted, refused time.Time) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.granted, fb.refused
}

func (fb *fakeBroker) pullsAfter(at time.Time) int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	n := 0
	for _, p := range fb.pulls {
		if p.After(at) {
			n++
		}
	}
	return n
}

func (fb *fakeBroker) serve(c net.Conn) {
	var wmu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		f, err := readFrame(c)
		if err != nil {
			return
		}
		wg.Add(1)
		go func() { // a held pull must not hold up the other requests
			defer wg.Done()
			code, ext, body, answer := fb.handle(f)
			if !answer {
				return
			}
			wmu.Lock()
			defer wmu.Unlock()
			_ = writeFrame(c, remotingHeader{Code: code, Flag: flagResponse, Opaque: f.Opaque, ExtFields: ext}, body)
		}()
	}
}

func (fb *fakeBroker) handle(f frame) (code int, ext map[string]string, body []byte, answer bool) {
	arrived := time.Now()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	switch f.Code {
	case rmqGetRouteInfoByTopic:
		body, _ = json.Marshal(map[string]any{
			"queueDatas":  []map[string]any{{"brokerName": "broker-a", "readQueueNums": 1, "writeQueueNums": 1}},
			"brokerDatas": []map[string]any{{"brokerName": "broker-a", "brokerAddrs": map[string]string{"0": fb.addr}}},
		})
	case rmqHeartbeat:
		var hb struct {
			ClientID string `json:"clientID"`
		}
		_ = json.Unmarshal(f.body, &hb)
		if !slices.Contains(fb.members, hb.ClientID) {
			fb.members = append(fb.members, hb.ClientID)
		}
	case rmqUnregisterClient:
		fb.members = slices.DeleteFunc(fb.members, func(m string) bool { return m == f.ExtFields["clientID"] })
	case rmqGetConsumerList:
		body, _ = json.Marshal(map[string]any{"consumerIdList": fb.members})
	case rmqLockBatchMQ:
		var req struct {
			MQSet []queue `json:"mqSet"`
		}
		_ = json.Unmarshal(f.body, &req)
		if fb.mode != lockGrant && fb.refused.IsZero() {
			fb.refused = arrived
		}
		switch fb.mode {
		case lockGrant:
			fb.granted = arrived
			body, _ = json.Marshal(map[string]any{"lockOKMQSet": req.MQSet})
		case lockRefuse:
			body, _ = json.Marshal(map[string]any{"lockOKMQSet": []queue{}})
		case lockFail:
			code = 1 // SYSTEM_ERROR
		case lockSilent:
			return 0, nil, nil, false
		}
	case rmqUnlockBatchMQ:
	case rmqQueryConsumerOffset:
		if fb.committed < 0 {
			return resQueryNotFound, nil, nil, true
		}
		ext = map[string]string{"offset": strconv.FormatInt(fb.committed, 10)}
	case rmqUpdateConsumerOff:
		fb.committed, _ = strconv.ParseInt(f.ExtFields["commitOffset"], 10, 64)
	case rmqPullMessage:
		fb.pulls = append(fb.pulls, arrived)
		off, _ := strconv.ParseInt(f.ExtFields["queueOffset"], 10, 64)
		max, _ := strconv.Atoi(f.ExtFields["maxMsgNums"])
		if off >= int64(len(fb.msgs)) {
			fb.mu.Unlock()
			time.Sleep(100 * time.Millisecond) // a long poll, shortened
			fb.mu.Lock()
			return resPullNotFound, map[string]string{"nextBeginOffset": strconv.FormatInt(off, 10)}, nil, true
		}
		next := min(off+int64(max), int64(len(fb.msgs)))
		body = bytes.Join(fb.msgs[off:next], nil)
		ext = map[string]string{"nextBeginOffset": strconv.FormatInt(next, 10)}
	default:
		return codeNotSupported, nil, nil, true
	}
	return code, ext, body, true
}

// storedMessage encodes a message as the broker stores and sends it
// (what primitive.DecodeMessage reads).
func storedMessage(topic string, offset int64, body string) []byte {
	props := []byte("ib-id\x01m" + strconv.FormatInt(offset, 10) + "\x02" +
		primitive.PropertyUniqueClientMessageIdKeyIndex + "\x01id" + strconv.FormatInt(offset, 10) + "\x02")
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.BigEndian, v) }
	w(int32(0))          // total size, filled in below
	w(int32(-626843481)) // magic code
	w(int32(0))          // body CRC
	w(int32(0))          // queue id
	w(int32(0))          // flag
	w(offset)            // queue offset
	w(offset * 100)      // commit log offset
	w(int32(0))          // sys flag: IPv4 hosts, not compressed
	w(time.Now().UnixMilli())
	b.Write([]byte{127, 0, 0, 1})
	w(int32(1234))
	w(time.Now().UnixMilli())
	b.Write([]byte{127, 0, 0, 1})
	w(int32(10911))
	w(int32(0)) // reconsume times
	w(int64(0)) // prepared transaction offset
	w(int32(len(body)))
	b.WriteString(body)
	b.WriteByte(byte(len(topic)))
	b.WriteString(topic)
	w(int16(len(props)))
	b.Write(props)
	out := b.Bytes()
	binary.BigEndian.PutUint32(out[0:4], uint32(len(out)))
	return out
}

// fakeSubscription subscribes to fb's topic with h through the driver's
// own consumer, retrying in place every 20 ms.
func fakeSubscription(t *testing.T, fb *fakeBroker, h brokers.Handler) *subscription {
	t.Helper()
	b := &Broker{namesrv: []string{fb.addr}, rm: &Remoting{}, instance: "fake", sendTimeout: time.Second}
	b.subs = driverutil.NewSubs[*subscription](&b.mu)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.subscribe(ctx, fb.topic, "g", brokers.SubscribeOptions{RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// TestFakeBrokerDelivers: the fake broker is enough for the consumer to
// deliver, settle and commit.
func TestFakeBrokerDelivers(t *testing.T) {
	fb := newFakeBroker(t, "t", "a", "b", "c")
	got := make(chan string, 10)
	s := fakeSubscription(t, fb, brokers.PerDelivery(func(_ context.Context, d *brokers.Delivery) brokers.Verdict {
		got <- string(d.Message.Body) + "/" + d.Message.ID
		return brokers.Ack
	}))
	var seen []string
	for len(seen) < 3 {
		select {
		case g := <-got:
			seen = append(seen, g)
		case <-time.After(10 * time.Second):
			t.Fatalf("delivered %v of 3 messages", seen)
		}
	}
	if !slices.Equal(seen, []string{"a/m0", "b/m1", "c/m2"}) {
		t.Fatalf("deliveries %v; want [a/m0 b/m1 c/m2]", seen)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.committed != 3 {
		t.Fatalf("committed offset %d after Close; want 3", fb.committed)
	}
}

// TestLostLockStopsTheQueue: the queue's lock is lost while its worker
// holds it, in the middle of a Handler that answers Retry (so the batch
// is handed to the Handler again and again in place, without a new
// batch). The broker answers the renewal without the queue (another
// member has it), with an error, or not at all. From the moment the
// consumer can no longer know it holds the lock (the refusal arrived, or
// the lease of the last granted lock ran out) no Handler call starts and
// the queue is no longer pulled; once the broker grants the lock again
// the queue is consumed again, from its committed offset.
func TestLostLockStopsTheQueue(t *testing.T) {
	for name, mode := range map[string]lockMode{"refused": lockRefuse, "error": lockFail, "silent": lockSilent} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fb := newFakeBroker(t, "t", "a")
			var mu sync.Mutex
			var calls []time.Time
			callsAfter := func(at time.Time) int {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, c := range calls {
					if c.After(at) {
						n++
					}
				}
				return n
			}
			fakeSubscription(t, fb, func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
				mu.Lock()
				calls = append(calls, time.Now())
				mu.Unlock()
				return []brokers.Verdict{brokers.Retry}
			})
			for deadline := time.Now().Add(10 * time.Second); callsAfter(time.Time{}) < 3; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the message was not delivered (and retried) within 10s")
				}
			}
			fb.setMode(mode)
			// When the consumer lost the right to deliver: the refusal's
			// answer, or the lease of the last lock it was granted.
			var cutoff time.Time
			for deadline := time.Now().Add(10 * time.Second); cutoff.IsZero(); time.Sleep(10 * time.Millisecond) {
				granted, refused := fb.lockTimes()
				switch {
				case mode == lockRefuse && !refused.IsZero():
					cutoff = refused
				case mode != lockRefuse && !refused.IsZero():
					cutoff = granted.Add(lockLease)
				}
				if time.Now().After(deadline) {
					t.Fatal("the consumer did not renew its lock within 10s")
				}
			}
			// The Handler returns at once, so a call that started before
			// the cutoff ends within a few ms; the timer that notices a
			// lapsed lease fires within a few ms too.
			const slack = 100 * time.Millisecond
			time.Sleep(time.Until(cutoff) + slack + time.Second)
			if n := callsAfter(cutoff.Add(slack)); n > 0 {
				t.Errorf("%d Handler calls started after the consumer lost the lock", n)
			}
			if n := fb.pullsAfter(cutoff.Add(slack)); n > 0 {
				t.Errorf("the queue was pulled %d times after the consumer lost the lock", n)
			}
			fb.setMode(lockGrant)
			back := time.Now()
			for deadline := time.Now().Add(10 * time.Second); callsAfter(back) == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the queue was not consumed again within 10s of the broker granting its lock again")
				}
			}
		})
	}
}
