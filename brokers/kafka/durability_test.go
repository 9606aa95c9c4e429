package kafka_test

import (
	"testing"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
)

// The driver reports what a confirm means on the real server, with the
// settings it read and a yes/no verdict on fsync.
func TestDurability(t *testing.T) {
	brokertest.Durability(t, driver.New(t), "acks", "replication.factor", "min.insync.replicas", "flush.messages", "broker log.flush.interval.messages")
}
