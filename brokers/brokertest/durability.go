package brokertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// Durability checks a driver's brokers.DurabilityReporter against its real
// server: on a fresh topic it reports every one of keys and a yes/no
// verdict under brokers.FsyncKey.
func Durability(t *testing.T, b brokers.Broker, keys ...string) map[string]string {
	t.Helper()
	topic := Topic(t, b, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := b.(brokers.DurabilityReporter).Durability(ctx, topic)
	if err != nil {
		t.Fatalf("Durability: %v (so far %v)", err, m)
	}
	for _, k := range keys {
		if m[k] == "" {
			t.Errorf("Durability lacks %q: %v", k, m)
		}
	}
	if v := m[brokers.FsyncKey]; !strings.HasPrefix(v, "yes") && !strings.HasPrefix(v, "no") {
		t.Errorf("%s = %q, want a yes/no verdict", brokers.FsyncKey, v)
	}
	t.Logf("%v", m)
	return m
}
