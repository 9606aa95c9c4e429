package brokertest

import (
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
	"github.com/inboxbench/inboxbench/workload"
)

// LargestWorkloadMessage publishes one message as large as a workload file
// may ask for (workload.MaxMessageSize, encoded by the workload's own
// encoder, with the longest key and id the generator makes) and consumes
// it back unchanged: the bound workload.Validate keeps must hold on every
// broker at its default limits.
func LargestWorkloadMessage(t *testing.T, newBroker NewBroker) {
	b := newBroker(t)
	topic := Topic(t, b, 1)
	s := workload.Defaults()
	s.MessageSize = workload.MaxMessageSize
	agg := "conflict-" + workload.AggregateID(999_999)
	e := &envelope.Event{SpecVersion: envelope.SpecVersion, Source: workload.Source,
		ID: workload.EventID(agg, 50_000_000) + "-conflict", Type: "account.snapshot", Time: time.Now().UTC(),
		Subject: agg, AggregateVersion: 50_000_000, Kind: envelope.Snapshot, Amount: 1 << 62,
		IdempotencyKey: "req-" + workload.EventID(agg, 50_000_000), Tenant: "tenant-1", Operation: "credit",
		IntendedAt: time.Now().UTC()}
	body, err := s.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) != workload.MaxMessageSize {
		t.Fatalf("the workload encoder made %d bytes at message_size %d", len(body), workload.MaxMessageSize)
	}
	msgs := []brokers.Message{{Key: agg, ID: e.ID, Body: body}}
	c := NewCollector(b.Name(), msgs)
	Publish(t, b, topic, msgs, publishTimeout)
	subscribe(t, b, topic, UniqueName(t, "g"), brokers.SubscribeOptions{}, brokers.PerDelivery(c.Handle))
	c.WaitAll(t, waitTimeout)
	c.Check(t, false)
	if got := len(c.Deliveries(e.ID)[0].Body); got != len(body) {
		t.Fatalf("%s: delivered %d bytes of a %d-byte message", b.Name(), got, len(body))
	}
}
