package kafkashare

import (
	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/kafka"
)

// NewEmbeddedForTest is the driver on an in-process kfake cluster (which
// serves share groups): the suite runs on it without a Kafka.
func NewEmbeddedForTest(opts brokers.Options) (*Broker, error) {
	lock, rest, err := lockOption(opts)
	if err != nil {
		return nil, err
	}
	kb, err := kafka.NewEmbeddedAs(Name, rest)
	if err != nil {
		return nil, err
	}
	return wrap(kb, lock), nil
}
