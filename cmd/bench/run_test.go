package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

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

// Flags whose default comes from the workload show none in --help, keep
// -1 ("the workload's") when not given, and refuse a negative value.
func TestUnsetFlagsShowNoSentinel(t *testing.T) {
	var fl runFlags
	f := pflag.NewFlagSet("run", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	fl.register(f)
	if u := f.FlagUsages(); strings.Contains(u, "(default -1") {
		t.Errorf("--help shows the sentinel:\n%s", u)
	}
	if err := f.Parse(nil); err != nil || fl.warmupRounds != -1 || fl.externalDelay != -1 {
		t.Fatalf("unset: warmup rounds %d, external delay %v, err %v; want -1, -1", fl.warmupRounds, fl.externalDelay, err)
	}
	if err := f.Parse([]string{"--warmup-rounds", "0", "--external-delay", "5ms"}); err != nil || fl.warmupRounds != 0 || fl.externalDelay != 5*time.Millisecond {
		t.Errorf("set: warmup rounds %d, external delay %v, err %v; want 0, 5ms", fl.warmupRounds, fl.externalDelay, err)
	}
	for _, arg := range []string{"--warmup-rounds=-1", "--external-delay=-1s", "--warmup-rounds=two"} {
		if err := f.Parse([]string{arg}); err == nil {
			t.Errorf("%s accepted", arg)
		}
	}
}
