package main

import (
	"slices"
	"testing"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
)

// TestBrokerServicesComeFromTheDrivers: the services a run checks are
// what the drivers registered, each once, none for a broker in this
// process; and each is a service of the local stack.
func TestBrokerServicesComeFromTheDrivers(t *testing.T) {
	got := brokerServices([]string{"none", "kafka", "kafka-embedded", "kafka", "rabbitmq"})
	if want := []string{"kafka", "rabbitmq"}; !slices.Equal(got, want) {
		t.Errorf("brokerServices = %v, want %v", got, want)
	}
	for _, s := range brokerServices(brokers.Names()) {
		if _, err := compose.Select(compose.VariantPlain, []string{s}); err != nil {
			t.Errorf("a driver runs as service %q, which the stack does not have: %v", s, err)
		}
	}
}
