package rocketmq_test

import (
	"testing"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
)

// The driver reports what a confirm means on the real server, with the
// settings it read and a yes/no verdict on fsync.
func TestDurability(t *testing.T) {
	brokertest.Durability(t, driver.New(t), "flushDiskType", "brokerRole")
}
