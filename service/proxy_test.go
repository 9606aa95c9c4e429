package service

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

// TestCutLosesWhatWasInFlight: a connection through the proxy works; Cut
// breaks it (a line sent across the cut never comes back) and a new
// connection works again afterwards.
func TestCutLosesWhatWasInFlight(t *testing.T) {
	p := NewProxies()
	defer p.Close()
	addr, err := p.Route(echoServer(t), "")
	if err != nil {
		t.Fatal(err)
	}
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	br, ir := bufio.NewReader(busy), bufio.NewReader(idle)
	for _, x := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{busy, br}, {idle, ir}} {
		if got, err := roundTrip(x.c, x.r, "hello"); err != nil || got != "hello\n" {
			t.Fatalf("before the cut: %q, %v", got, err)
		}
	}
	cut := make(chan error, 1)
	go func() { cut <- p.Cut(context.Background()) }()
	time.Sleep(100 * time.Millisecond) // the reset toxics are in place
	if got, err := roundTrip(busy, br, "ack-in-flight"); err == nil {
		t.Fatalf("a line sent across the cut came back: %q", got)
	}
	if err := <-cut; err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(idle, ir, "still there?"); err == nil {
		t.Fatalf("an idle connection survived the cut: %q", got)
	}
	again, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	defer again.Close()
	if got, err := roundTrip(again, bufio.NewReader(again), "back"); err != nil || got != "back\n" {
		t.Fatalf("after the cut: %q, %v", got, err)
	}
}
