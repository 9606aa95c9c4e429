package rocketmq

import (
	"context"
	"fmt"
	rocketmqbroker "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
)

// TestRocketMQStackLibConsumer is an integration smoke test of the running
// RocketMQ (the local stack or the configured cluster; it does not start
// anything): readiness with a registered broker, a topic created through
// the admin API and visible in the name server's routes, then messages
// sent with one sharding key (hash selector) and received in order by the
// client library's push consumer, which has data races of its own:
// "LibConsumer" in the name keeps it out of `make test`'s -race run.
func TestRocketMQStackLibConsumer(t *testing.T) {
	rlog.SetLogLevel("fatal") // the client logs connection teardown at error level
	cfg := testenv.Require(t, testenv.RocketMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	version, err := (&Service{}).Ready(rctx, &compose.Env{Dir: t.TempDir(), Cfg: cfg})
	rcancel()
	if err != nil {
		t.Fatalf("rocketmq Ready: %v", err)
	}
	t.Logf("rocketmq version: %s", version)

	rm, err := rocketmqbroker.NewRemoting(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := rm.ClusterInfo(ctx, cfg.List(rocketmqbroker.SettingNamesrv)[0])
	if err != nil {
		t.Fatal(err)
	}
	brokers := ci.BrokerAddrs()
	if len(brokers) == 0 {
		t.Fatal("no broker registered with the name server")
	}
	broker := brokers[0]

	var creds []admin.AdminOption
	credentials := primitive.Credentials{AccessKey: cfg.Get(rocketmqbroker.SettingAccessKey), SecretKey: cfg.Get(rocketmqbroker.SettingSecretKey)}
	if cfg.Get(rocketmqbroker.SettingAccessKey) != "" {
		creds = append(creds, admin.WithCredentials(credentials))
	}
	resolver := primitive.NewPassthroughResolver(cfg.List(rocketmqbroker.SettingNamesrv))
	adm, err := admin.NewAdmin(append(creds, admin.WithResolver(resolver))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Close() }) // after the topic is deleted (cleanups run last-in first-out)

	topic := fmt.Sprintf("inboxbench_compose_smoke_%d", time.Now().UnixNano())
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(broker),
		admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
		t.Fatalf("create topic %s on %s: %v", topic, broker, err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer dcancel()
		if err := adm.DeleteTopic(dctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(broker),
			admin.WithNameSrvAddr(cfg.List(rocketmqbroker.SettingNamesrv))); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	})

	// The name server must route the new topic (the broker registers it).
	queues := 0
	for queues == 0 {
		n, err := rm.RouteQueues(ctx, cfg.List(rocketmqbroker.SettingNamesrv)[0], topic)
		if err != nil {
			t.Fatalf("route of %s: %v", topic, err)
		}
		queues = n
		if queues == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("the name server has no route for %s: %v", topic, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	if queues != 4 {
		t.Fatalf("route of %s has %d write queues, want 4", topic, queues)
	}

	// Receive with a push consumer (started first, from the first offset).
	const n = 5
	const key = "aggregate-7"
	type delivery struct {
		body  string
		queue int
	}
	var mu sync.Mutex
	var received []delivery
	done := make(chan struct{})
	copts := []consumer.Option{
		consumer.WithNsResolver(resolver),
		consumer.WithGroupName(topic + "_group"),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerOrder(true),
	}
	if cfg.Get(rocketmqbroker.SettingAccessKey) != "" {
		copts = append(copts, consumer.WithCredentials(credentials))
	}
	pc, err := rocketmq.NewPushConsumer(copts...)
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			received = append(received, delivery{string(m.Body), m.Queue.QueueId})
		}
		if len(received) == n {
			close(done)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatalf("start push consumer: %v", err)
	}
	defer pc.Shutdown() //nolint:errcheck

	popts := []producer.Option{
		producer.WithNsResolver(resolver),
		producer.WithGroupName(topic + "_producer"),
		producer.WithQueueSelector(producer.NewHashQueueSelector()),
		producer.WithRetry(2),
	}
	if cfg.Get(rocketmqbroker.SettingAccessKey) != "" {
		popts = append(popts, producer.WithCredentials(credentials))
	}
	p, err := rocketmq.NewProducer(popts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("start producer: %v", err)
	}
	defer p.Shutdown() //nolint:errcheck
	sentQueue := -1
	for i := 0; i < n; i++ {
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("%s/%d", key, i)))
		m.WithShardingKey(key)
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := p.SendSync(sctx, m)
		scancel()
		if err != nil {
			t.Fatalf("send %d to %s: %v", i, topic, err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("send %d to %s: status %v", i, topic, res.Status)
		}
		if sentQueue >= 0 && res.MessageQueue.QueueId != sentQueue {
			t.Fatalf("sharding key %s sent to queues %d and %d", key, sentQueue, res.MessageQueue.QueueId)
		}
		sentQueue = res.MessageQueue.QueueId
	}

	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("received %d of %d messages before the deadline", len(received), n)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, d := range received {
		if want := fmt.Sprintf("%s/%d", key, i); d.body != want {
			t.Errorf("message %d is %q, want %q (order broken)", i, d.body, want)
		}
		if d.queue != sentQueue {
			t.Errorf("message %d came from queue %d, sent to %d", i, d.queue, sentQueue)
		}
	}
}

// TestRocketMQConfig needs no server: the generated configs keep every
// port on loopback and the store under the stack directory.
func TestRocketMQConfig(t *testing.T) {
	e := &compose.Env{Dir: t.TempDir(), Cfg: config.Default()}
	if err := (&Service{}).writeConfig(e); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		"namesrv.properties": {"bindAddress=127.0.0.1\n", "listenPort=59876\n", "scanAvailableNameSrv=false\n"},
		"broker.conf": {"bindAddress=127.0.0.1\n", "brokerIP1=127.0.0.1\n", "listenPort=50911\n",
			"namesrvAddr=127.0.0.1:59876\n", "storePathRootDir=" + e.Path("rocketmq", "store") + "\n", "mappedFileSizeCommitLog=134217728\n"},
	} {
		b, err := os.ReadFile(e.Path("rocketmq", "conf", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q:\n%s", file, w, b)
			}
		}
	}
}

// RocketMQ flushes synchronously only under the fsync profile.
func TestDurabilityProfilesRenderSettings(t *testing.T) {
	for profile, want := range map[string]string{compose.DurabilityStock: "flushDiskType=ASYNC_FLUSH\n", compose.DurabilityFsync: "flushDiskType=SYNC_FLUSH\n", compose.DurabilityOS: "flushDiskType=ASYNC_FLUSH\n"} {
		e := &compose.Env{Dir: t.TempDir(), Cfg: config.Default(), Durability: profile}
		if err := (&Service{}).writeConfig(e); err != nil {
			t.Fatal(err)
		}
		conf, _ := os.ReadFile(e.Path("rocketmq", "conf", "broker.conf"))
		if !strings.Contains(string(conf), want) {
			t.Errorf("%s: broker.conf lacks %q", profile, want)
		}
	}
}
