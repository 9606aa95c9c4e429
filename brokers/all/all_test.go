package all_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/brokers"
	_ "github.com/inboxbench/inboxbench/brokers/all"
	"github.com/inboxbench/inboxbench/config"
)

func TestEveryDriverRegistered(t *testing.T) {
	want := []string{"kafka", "kafka-embedded", "kafka-share", "nats", "none", "rabbitmq", "redis", "rocketmq"}
	if got := brokers.Names(); !slices.Equal(got, want) {
		t.Fatalf("registered drivers %v, want %v", got, want)
	}
}

func TestOpenUnknownNamesTheChoices(t *testing.T) {
	_, err := brokers.Open(context.Background(), "kafak", config.Default(), nil)
	if err == nil || !strings.Contains(err.Error(), "rabbitmq") {
		t.Fatalf("want an error listing the drivers, got %v", err)
	}
}

func TestRegisterDuplicatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering kafka twice did not panic")
		}
	}()
	brokers.Register("kafka", func(context.Context, config.Config, brokers.Options) (brokers.Broker, error) { return nil, nil }, brokers.Info{})
}

// Opening a driver must not need a running server (connections are lazy),
// and every driver describes itself, its service included.
func TestOpenIsLazyAndDescribed(t *testing.T) {
	for _, name := range brokers.Names() {
		b, err := brokers.Open(context.Background(), name, config.Default(), nil)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		if b.Name() != name || b.Capabilities().Description == "" {
			t.Errorf("%s: name %q, capabilities %+v", name, b.Name(), b.Capabilities())
		}
		// A broker outside this process runs as a stack service, which a
		// run checks before publishing; one inside needs none.
		if info := brokers.InfoOf(name); (info.Service == "") != b.Capabilities().InProcess {
			t.Errorf("%s: registered service %q, but in process: %v", name, info.Service, b.Capabilities().InProcess)
		}
		if err := b.Close(); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
	}
}

// TestAllIsTheBaselineAndTheStackServed: --brokers all names the baseline
// first, then every driver served by a stack service, and never a driver
// whose broker lives in the process; a driver's Info.Baseline says what
// its Capabilities say.
func TestAllIsTheBaselineAndTheStackServed(t *testing.T) {
	all := brokers.All()
	if len(all) == 0 || all[0] != "none" || slices.Contains(all, "kafka-embedded") {
		t.Fatalf("All() = %v: want none first and no in-process driver", all)
	}
	for _, name := range brokers.Names() {
		b, err := brokers.Open(context.Background(), name, config.Default(), nil)
		if err != nil {
			t.Fatal(err)
		}
		caps := b.Capabilities()
		b.Close()
		info := brokers.InfoOf(name)
		if info.Baseline != caps.Baseline {
			t.Errorf("%s: Info.Baseline %v, Capabilities().Baseline %v", name, info.Baseline, caps.Baseline)
		}
		if want := info.Baseline || info.Service != ""; slices.Contains(all, name) != want {
			t.Errorf("%s in All() = %v, want %v", name, !want, want)
		}
	}
}
