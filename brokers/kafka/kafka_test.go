package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/workload"
)

// driver is the driver on the local stack, embedded the one on kfake.
var (
	driver   = brokertest.OnStack(kafka.Name, testenv.Kafka)
	embedded = brokertest.InProcess(kafka.EmbeddedName)
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
}
func TestConformanceEmbedded(t *testing.T) {
	brokertest.Run(t, embedded.New, brokertest.WithWindow(embedded.Window))
}

func BenchmarkRaw1KiB(b *testing.B)         { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)        { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B)       { brokertest.Drain1KiB(b, driver.New) }
func BenchmarkRaw1KiBEmbedded(b *testing.B) { brokertest.Raw1KiB(b, embedded.New) }

func TestOptionsRejectUnknown(t *testing.T) {
	_, err := kafka.NewEmbedded(context.Background(), brokers.Options{"replication-fctor": "1"})
	if err == nil || !strings.Contains(err.Error(), "replication-fctor") {
		t.Fatalf("want an error naming the unknown option, got %v", err)
	}
}

// A cluster that disappears mid-test yields an error naming the broker
// within the caller's deadline, not a hang.
func TestStoppedClusterFailsFast(t *testing.T) {
	b, err := kafka.NewEmbedded(context.Background(), brokers.Options{kafka.OptDeliveryTimeout: "3s"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := brokertest.UniqueName(t, "ib")
	if err := b.Setup(ctx, topic, 2); err != nil {
		t.Fatal(err)
	}
	b.StopEmbeddedForTest()
	start := time.Now()
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	err = brokers.FirstError(b.Publish(pctx, topic, brokertest.Events(t, "e", 1, 1, 0)))
	if err == nil || !strings.Contains(err.Error(), "kafka-embedded") {
		t.Fatalf("publish to a stopped cluster: want an error naming kafka-embedded, got %v", err)
	}
	if time.Since(start) > 12*time.Second {
		t.Errorf("publish to a stopped cluster took %v", time.Since(start))
	}
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("Close hung after the cluster stopped")
	}
}

func TestRegistered(t *testing.T) {
	names := strings.Join(brokers.Names(), ",")
	if !strings.Contains(names, kafka.Name) || !strings.Contains(names, kafka.EmbeddedName) {
		t.Fatalf("registry holds %s", names)
	}
}

// The largest message_size a workload accepts fits Kafka's default limit,
// the smallest of the three brokers'.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, driver.New) }

// One byte over the limit the workload bound is derived from fails: the
// limit is real, so the bound is not just a guess.
func TestMessageOverBatchLimitFails(t *testing.T) {
	b := driver.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := brokertest.Topic(t, b, 1)
	msg := brokers.Message{Key: "k", ID: "too-large", Body: make([]byte, workload.KafkaBatchLimit)}
	err := brokers.FirstError(b.Publish(ctx, topic, []brokers.Message{msg}))
	if err == nil || !strings.Contains(err.Error(), "MESSAGE_TOO_LARGE") {
		t.Fatalf("publishing %d bytes: want MESSAGE_TOO_LARGE, got %v", len(msg.Body), err)
	}
}

func TestCompressionOptionChecked(t *testing.T) {
	_, err := kafka.NewEmbedded(context.Background(), brokers.Options{kafka.OptCompression: "brotli"})
	if err == nil || !strings.Contains(err.Error(), "compression") || !strings.Contains(err.Error(), "zstd") {
		t.Fatalf("want an error naming the option and the codecs, got %v", err)
	}
	b, err := kafka.NewEmbedded(context.Background(), brokers.Options{kafka.OptCompression: "lz4"})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}
