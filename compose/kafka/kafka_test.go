package kafka

import (
	"context"
	"fmt"
	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	testenv "github.com/inboxbench/inboxbench/internal/testenv/core"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaStack is an integration smoke test of the running Kafka (the
// local stack or the configured cluster; it does not start anything):
// readiness with a version, then a keyed produce/consume through a fresh
// 4-partition topic, checking each key's records land in one partition in
// the order they were produced.
func TestKafkaStack(t *testing.T) {
	cfg := testenv.Require(t, testenv.Kafka)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	version, err := (&Service{}).Ready(rctx, &compose.Env{Dir: t.TempDir(), Cfg: cfg})
	rcancel()
	if err != nil {
		t.Fatalf("kafka Ready: %v", err)
	}
	if version == "" {
		t.Fatal("kafka Ready returned an empty version")
	}
	t.Logf("kafka version: %s", version)

	opts, err := kafkabroker.ClientOpts(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close) // after the topic is deleted (cleanups run last-in first-out)
	adm := kadm.NewClient(admCl)

	topic := fmt.Sprintf("inboxbench-compose-smoke-%d", time.Now().UnixNano())
	const partitions = 4
	res, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer dcancel()
		if _, err := adm.DeleteTopics(dctx, topic); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	})

	// Produce: three keys interleaved, each with a per-key sequence.
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	keys := []string{"aggregate-1", "aggregate-2", "aggregate-3"}
	const perKey = 10
	var recs []*kgo.Record
	for i := 0; i < perKey; i++ {
		for _, k := range keys {
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("%s/%d", k, i))})
		}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	producedPartition := map[string]int32{}
	for _, r := range recs {
		k := string(r.Key)
		if p, ok := producedPartition[k]; ok && p != r.Partition {
			t.Fatalf("key %s produced to partitions %d and %d", k, p, r.Partition)
		}
		producedPartition[k] = r.Partition
	}

	// Consume everything back from the start.
	cons, err := kgo.NewClient(append(opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[string][]*kgo.Record{}
	n := 0
	for n < len(recs) {
		fetches := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", n, len(recs))
		}
		for _, fe := range fetches.Errors() {
			t.Fatalf("fetch %s[%d]: %v", fe.Topic, fe.Partition, fe.Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			got[string(r.Key)] = append(got[string(r.Key)], r)
			n++
		})
	}
	if n != len(recs) {
		t.Fatalf("consumed %d records, produced %d", n, len(recs))
	}
	for _, k := range keys {
		rs := got[k]
		if len(rs) != perKey {
			t.Fatalf("key %s: consumed %d records, want %d", k, len(rs), perKey)
		}
		for i, r := range rs {
			if r.Partition != producedPartition[k] {
				t.Errorf("key %s: record %d in partition %d, want %d", k, i, r.Partition, producedPartition[k])
			}
			if want := fmt.Sprintf("%s/%d", k, i); string(r.Value) != want {
				t.Errorf("key %s: record %d is %q, want %q (order broken)", k, i, r.Value, want)
			}
			if i > 0 && r.Offset <= rs[i-1].Offset {
				t.Errorf("key %s: offsets not increasing: %d after %d", k, r.Offset, rs[i-1].Offset)
			}
		}
	}
}

// TestKafkaConfig needs no server: the generated server.properties is a
// single loopback KRaft node with its data under the stack directory, and
// the runtime pins the log4j2 binding.
func TestKafkaConfig(t *testing.T) {
	e := &compose.Env{Dir: t.TempDir(), Cfg: config.Default()}
	if err := (&Service{}).writeConfig(e); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(e.Path("kafka", "config", "server.properties"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"process.roles=broker,controller\n", "node.id=1\n", "controller.quorum.voters=1@127.0.0.1:59093\n",
		"listeners=PLAINTEXT://127.0.0.1:59092,CONTROLLER://127.0.0.1:59093,OUTSIDE://127.0.0.1:59094\n",
		"advertised.listeners=PLAINTEXT://127.0.0.1:59092,OUTSIDE://127.0.0.1:59095\n", "log.dirs=" + e.Path("kafka", "data") + "\n",
		"offsets.topic.replication.factor=1\n", "transaction.state.log.min.isr=1\n", "group.initial.rebalance.delay.ms=0\n",
		"group.share.session.timeout.ms=10000\n", "group.share.min.session.timeout.ms=10000\n",
	} {
		if !strings.Contains(string(b), w) {
			t.Errorf("server.properties lacks %q:\n%s", w, b)
		}
	}
	pom, err := javaRuntime.Pom()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"<artifactId>kafka_2.13</artifactId>", "<artifactId>log4j-slf4j2-impl</artifactId>", "<artifactId>slf4j-api</artifactId>"} {
		if !strings.Contains(string(pom), w) {
			t.Errorf("pom lacks %s", w)
		}
	}
}

// Kafka fsyncs every append only under the fsync profile.
func TestDurabilityProfilesRenderSettings(t *testing.T) {
	for profile, want := range map[string]string{compose.DurabilityStock: "", compose.DurabilityFsync: "log.flush.interval.messages=1\n", compose.DurabilityOS: ""} {
		e := &compose.Env{Dir: t.TempDir(), Cfg: config.Default(), Durability: profile}
		if err := (&Service{}).writeConfig(e); err != nil {
			t.Fatal(err)
		}
		props, _ := os.ReadFile(e.Path("kafka", "config", "server.properties"))
		if got := strings.Contains(string(props), "log.flush.interval.messages="); got != (want != "") || (want != "" && !strings.Contains(string(props), want)) {
			t.Errorf("%s: kafka server.properties flush setting wrong (want %q):\n%s", profile, want, props)
		}
	}
}
