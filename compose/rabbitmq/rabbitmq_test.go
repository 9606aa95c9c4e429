package rabbitmq

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
)

// TestRabbitMQSmoke publishes to a quorum queue with a publisher confirm
// and consumes with a manual ack, as the inbox consumers do.
func TestRabbitMQSmoke(t *testing.T) {
	cfg := testenv.Require(t, testenv.RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.Dial(cfg.Get(rabbitmqbroker.SettingURL))
	if err != nil {
		t.Fatalf("rabbitmq: dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("smoke.%d", time.Now().UnixNano())
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("rabbitmq: declare quorum queue: %v", err)
	}
	defer ch.QueueDelete(q, false, false, false) //nolint:errcheck
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
		MessageId: "smoke-1", DeliveryMode: amqp.Persistent, Body: []byte("hello"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("rabbitmq: publisher confirm: ok=%v err=%v", ok, err)
	}
	msgs, err := ch.ConsumeWithContext(ctx, q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-msgs:
		if d.MessageId != "smoke-1" || string(d.Body) != "hello" {
			t.Fatalf("got message %q %q", d.MessageId, d.Body)
		}
		if d.Redelivered {
			t.Errorf("first delivery marked redelivered")
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("rabbitmq: the published message was not delivered within 30s")
	}
	// The ack must have emptied the queue.
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages != 0 {
		t.Errorf("queue still holds %d messages after ack", info.Messages)
	}
}

// TestRabbitMQLoopbackConfig needs no server: AMQP, epmd and the Erlang
// distribution port are all bound to 127.0.0.1.
func TestRabbitMQLoopbackConfig(t *testing.T) {
	env := strings.Join((&Service{}).env(&compose.Env{Dir: t.TempDir()}), "\n")
	for _, w := range []string{
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1\n",
		"ERL_EPMD_ADDRESS=127.0.0.1\n",
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d\n", rabbitDistPort),
		"-kernel inet_dist_use_interface {127,0,0,1}",
	} {
		if !strings.Contains(env+"\n", w) {
			t.Errorf("the node's environment lacks %q", w)
		}
	}
}

// TestWaitUnregistered: down waits until epmd no longer lists the node,
// and says so when it still does.
func TestWaitUnregistered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var listed atomic.Int32 // answers that still list the node
	listed.Store(3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			req := make([]byte, 3)
			if _, err := io.ReadFull(c, req); err == nil && req[2] == 110 { // NAMES_REQ
				out := "\x00\x00\x11\x11name other at port 1\n"
				if listed.Add(-1) >= 0 {
					out += "name inboxbench at port 55673\n"
				}
				_, _ = c.Write([]byte(out))
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	if names, err := epmdNames(context.Background(), addr); err != nil || !slices.Equal(names, []string{"other", "inboxbench"}) {
		t.Fatalf("epmdNames = %v, %v; want [other inboxbench]", names, err)
	}
	if err := waitUnregistered(context.Background(), addr, "inboxbench", 5*time.Second); err != nil {
		t.Fatalf("the node left epmd after a few answers: %v", err)
	}
	listed.Store(1 << 30)
	err = waitUnregistered(context.Background(), addr, "inboxbench", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still registered with epmd at "+addr) {
		t.Fatalf("a node that stays registered: %v", err)
	}
	ln.Close()
	if err := waitUnregistered(context.Background(), addr, "inboxbench", time.Second); err != nil {
		t.Fatalf("no epmd at all means nothing is registered: %v", err)
	}
}

// TestRabbitMQAddrDefaultsByScheme: an amqps:// URL without a port is
// checked at 5671, where the driver connects, not at 5672.
func TestRabbitMQAddrDefaultsByScheme(t *testing.T) {
	for raw, want := range map[string]string{
		"amqps://u:p@rabbit.example/v": "rabbit.example:5671",
		"amqp://u:p@rabbit.example/v":  "rabbit.example:5672",
		"amqps://rabbit.example:7000/": "rabbit.example:7000",
	} {
		e := &compose.Env{Cfg: config.Default().With(rabbitmqbroker.SettingURL, raw)}
		if got := (&Service{}).Addr(e); got != want {
			t.Errorf("%s: checked at %s, want %s", raw, got, want)
		}
	}
}
