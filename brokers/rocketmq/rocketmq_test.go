package rocketmq_test

import (
	"testing"

	"github.com/inboxbench/inboxbench/brokers/brokertest"
	"github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// driver is the driver on the local stack.
var driver = brokertest.OnStack(rocketmq.Name, testenv.RocketMQ)

func TestConformance(t *testing.T) {
	brokertest.Run(t, driver.New, brokertest.WithWindow(driver.Window))
}

func BenchmarkRaw1KiB(b *testing.B)   { brokertest.Raw1KiB(b, driver.New) }
func BenchmarkRate1KiB(b *testing.B)  { brokertest.Rate1KiB(b, driver.New) }
func BenchmarkDrain1KiB(b *testing.B) { brokertest.Drain1KiB(b, driver.New) }

// The largest message_size a workload accepts goes through at the
// broker's default limits.
func TestLargestWorkloadMessage(t *testing.T) { brokertest.LargestWorkloadMessage(t, driver.New) }
