package nats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/nats"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// driver is the driver on the local stack.
var driver = brokertest.OnStack(nats.Name, testenv.NATS)

func TestConformance(t *testing.T) {
	brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
}

func BenchmarkRaw1KiB(b *testing.B)   { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)  { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B) { brokertest.Drain1KiB(b, driver.New) }

// Setup keeps a topic's shard count.
func TestSetupKeepsShards(t *testing.T) { brokertest.SetupKeepsShards(t, driver.New(t)) }

// Publishing to a topic that was never set up is an error, never a
// silent drop.
func TestPublishUnknownTopicFails(t *testing.T) {
	b := driver.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := brokers.FirstError(b.Publish(ctx, brokertest.UniqueName(t, "ib"), brokertest.Events(t, "e", 1, 1, 0)))
	if err == nil || !strings.Contains(err.Error(), "nats") {
		t.Fatalf("want an error naming nats, got %v", err)
	}
}

// A second publish of an event id within the stream's Duplicates window
// is confirmed as ErrDeduplicated and never delivered; the same id after
// the window is stored again: the broker's dedup covers a quick retry,
// not a later republish.
func TestDuplicateWindow(t *testing.T) {
	cfg := testenv.Require(t, testenv.NATS).With(nats.SettingDuplicateWindow, "1s")
	br, err := brokers.Open(context.Background(), nats.Name, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	if got := br.Capabilities().BrokerDedup; got != time.Second {
		t.Fatalf("BrokerDedup = %v, want the configured 1s", got)
	}
	topic := brokertest.Topic(t, br, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := brokertest.Events(t, "dup", 1, 1, 0)
	if err := errors.Join(br.Publish(ctx, topic, m)...); err != nil {
		t.Fatal(err)
	}
	if errs := br.Publish(ctx, topic, m); !errors.Is(errs[0], brokers.ErrDeduplicated) {
		t.Fatalf("a second publish within the window: %v, want ErrDeduplicated", errs[0])
	}
	time.Sleep(1500 * time.Millisecond)
	if err := errors.Join(br.Publish(ctx, topic, m)...); err != nil {
		t.Fatalf("a publish after the window: %v, want it stored", err)
	}
}

// A service under test is sent to the proxy, never to the server itself,
// with the topic's streams and its dead-letter subject.
func TestOutsideEnvRoutesTheURL(t *testing.T) {
	b := driver.New(t)
	topic := brokertest.Topic(t, b, 2)
	var upstream string
	env, err := b.(brokers.Outside).OutsideEnv(topic, "g", func(up, _ string) (string, error) {
		upstream = up
		return "127.0.0.1:1", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if upstream != nats.Addr(nats.DefaultURL) || env.Vars["INBOXBENCH_NATS_URL"] != "nats://127.0.0.1:1" || env.Unproxied != "" {
		t.Fatalf("routed %s, env %+v", upstream, env)
	}
	if env.Vars["INBOXBENCH_QUEUES"] != nats.StreamName(topic, 0)+","+nats.StreamName(topic, 1) || env.Vars["INBOXBENCH_DEAD_LETTER"] != nats.DLQSubject(topic) {
		t.Fatalf("env %+v", env.Vars)
	}
}
