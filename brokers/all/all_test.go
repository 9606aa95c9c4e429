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
	want := []string{"kafka", "kafka-embedded", "kafka-share", "nats", "none", "rabbitmq", "rocketmq"}
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
