package redis_test

import (
	"testing"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/redis"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// driver is the driver on the local stack.
var driver = brokertest.OnStack(redis.Name, testenv.Redis)

func TestConformance(t *testing.T) {
	brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
}

func BenchmarkRaw1KiB(b *testing.B)   { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)  { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B) { brokertest.Drain1KiB(b, driver.New) }

func TestSetupRejectsFewerShards(t *testing.T) { brokertest.SetupKeepsShards(t, driver.New(t)) }

// The largest message_size a workload accepts goes through.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, driver.New) }

// The driver reports what a reply to XADD means on the real server, with
// a yes/no verdict on fsync.
func TestDurability(t *testing.T) {
	brokertest.Durability(t, driver.New(t), "appendonly", "appendfsync", "server")
}
