package rocketmq

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func queues(n int) []queue {
	var qs []queue
	for i := range n {
		qs = append(qs, queue{Topic: "t", BrokerName: "broker-a", QueueID: i})
	}
	return qs
}

func TestAllocateSplitsEveryQueueOnce(t *testing.T) {
	for _, tc := range []struct{ queues, members int }{{8, 1}, {8, 3}, {8, 4}, {8, 8}, {3, 5}, {1, 2}} {
		qs := queues(tc.queues)
		var members []string
		for i := range tc.members {
			members = append(members, "c"+strconv.Itoa(tc.members-i)) // unsorted on purpose
		}
		seen := map[queue]string{}
		for _, m := range members {
			share := allocate(qs, members, m)
			if len(share) > tc.queues/tc.members+1 || len(share) < tc.queues/tc.members {
				t.Errorf("%d queues, %d members: %s got %d queues", tc.queues, tc.members, m, len(share))
			}
			for _, q := range share {
				if other, dup := seen[q]; dup {
					t.Errorf("%d queues, %d members: %v given to %s and %s", tc.queues, tc.members, q, other, m)
				}
				seen[q] = m
			}
		}
		if len(seen) != tc.queues {
			t.Errorf("%d queues, %d members: %d allocated", tc.queues, tc.members, len(seen))
		}
	}
	if got := allocate(queues(8), []string{"a", "b"}, "c"); got != nil {
		t.Errorf("a consumer missing from the member list got %v; want nothing", got)
	}
}

// fakeServer answers remoting requests on a loopback listener: code 1
// requests are answered in reverse order of arrival, two at a time (so
// responses cross), after the server first sends a one-way notification.
func fakeServer(t *testing.T) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	accepted := make(chan net.Conn, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
		defer c.Close()
		var held []frame
		for {
			f, err := readFrame(c)
			if err != nil {
				return
			}
			held = append(held, f)
			if len(held) < 2 {
				continue
			}
			notify := remotingHeader{Code: rmqNotifyIDsChanged, Flag: flagOneway, Opaque: 999, ExtFields: map[string]string{"consumerGroup": "g"}}
			if err := writeFrame(c, notify, nil); err != nil {
				return
			}
			for i := len(held) - 1; i >= 0; i-- {
				r := remotingHeader{Code: 0, Flag: flagResponse, Opaque: held[i].Opaque, ExtFields: map[string]string{"echo": held[i].ExtFields["n"]}}
				if err := writeFrame(c, r, held[i].body); err != nil {
					return
				}
			}
			held = nil
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		if c, ok := <-accepted; ok {
			c.Close()
		}
		wg.Wait()
	}
}

func TestConnMatchesCrossedResponses(t *testing.T) {
	addr, stop := fakeServer(t)
	notified := make(chan map[string]string, 1)
	c, err := (&Remoting{}).dialConn(context.Background(), addr, func(code int, ext map[string]string) {
		if code == rmqNotifyIDsChanged {
			notified <- ext
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	got := make([]string, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := c.call(ctx, 1, map[string]string{"n": strconv.Itoa(i)}, []byte(fmt.Sprint("body", i)))
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			got[i] = f.ExtFields["echo"] + "/" + string(f.body)
		}()
	}
	wg.Wait()
	if !slices.Equal(got, []string{"0/body0", "1/body1"}) {
		t.Fatalf("responses matched to calls: %v; want [0/body0 1/body1]", got)
	}
	select {
	case ext := <-notified:
		if ext["consumerGroup"] != "g" {
			t.Errorf("notification fields %v", ext)
		}
	case <-ctx.Done():
		t.Fatal("the server's one-way notification never reached onRequest")
	}
	// The server is gone: a pending call fails instead of hanging.
	done := make(chan error, 1)
	go func() {
		_, err := c.call(ctx, 1, nil, nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	stop()
	if err := <-done; err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call on a connection the server closed returned %v; want the connection's error", err)
	}
	if !c.broken() {
		t.Fatal("the connection does not report itself broken")
	}
}

// TestFrameOverTheLimitIsRefused: a frame longer than maxFrame is refused
// from its length prefix, with an error that says so, before anything is
// allocated for it; on a connection, the call waiting for it fails with
// that error and the connection is closed, instead of the driver waiting
// for (or allocating) gigabytes.
func TestFrameOverTheLimitIsRefused(t *testing.T) {
	huge := func(total uint32) []byte {
		b := make([]byte, 8, 64)
		binary.BigEndian.PutUint32(b[0:4], total)
		binary.BigEndian.PutUint32(b[4:8], 2)
		return append(b, "{}"...) // the rest never comes
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readFrame(bytes.NewReader(huge(0xFFFFFFF0)))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "over the driver's limit of 64 MiB") {
		t.Fatalf("a 4 GiB frame: %v; want a refusal naming the limit", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("refusing a 4 GiB frame allocated %d bytes", grew)
	}
	if _, err := readFrame(bytes.NewReader(huge(maxFrame + 1))); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a frame one byte over the limit: %v; want it refused", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := readFrame(c); err == nil {
			_, _ = c.Write(huge(1 << 30)) // announce 1 GiB, send nothing more
			time.Sleep(5 * time.Second)
		}
	}()
	c, err := (&Remoting{}).dialConn(context.Background(), ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = c.call(ctx, rmqGetConsumerList, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "remoting frame of 1073741824 bytes refused") {
		t.Fatalf("a call answered with a 1 GiB frame: %v; want the refusal, at once", err)
	}
	if !c.broken() {
		t.Fatal("the connection is still open after a refused frame")
	}
}
