package rocketmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/brokertest"
)

// The driver reports what a confirm means on the real server, with the
// settings it read and a yes/no verdict on fsync.
func TestDurability(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := brokertest.UniqueName(t, "dur")
	if err := b.Setup(ctx, topic, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.(brokers.TopicDeleter).DeleteTopic(context.Background(), topic) })
	m, err := b.(brokers.DurabilityReporter).Durability(ctx, topic)
	if err != nil {
		t.Fatalf("Durability: %v (so far %v)", err, m)
	}
	for _, k := range []string{"flushDiskType", "brokerRole"} {
		if m[k] == "" {
			t.Errorf("Durability lacks %q: %v", k, m)
		}
	}
	if v := m[brokers.FsyncKey]; !strings.HasPrefix(v, "yes") && !strings.HasPrefix(v, "no") {
		t.Errorf("%s = %q, want a yes/no verdict", brokers.FsyncKey, v)
	}
	t.Logf("%v", m)
}
