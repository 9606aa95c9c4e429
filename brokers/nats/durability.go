package nats

import (
	"context"
	"fmt"

	"github.com/inboxbench/inboxbench/brokers"
)

var _ brokers.DurabilityReporter = (*Broker)(nil)

// Durability implements brokers.DurabilityReporter. A PubAck comes once
// the stream stored the message in its file; whether that file was
// fsync'ed is the server's sync_interval (two minutes as shipped, or
// "always"), which the client protocol does not show: the local stack's
// durability profile sets it (compose/nats). The streams' own settings
// (storage, replicas, Duplicates) are read from the server.
func (b *Broker) Durability(ctx context.Context, topic string) (map[string]string, error) {
	out := map[string]string{
		"publish acknowledgement": "PubAck: the stream stored the message (in its file, in the page cache)",
		"sync_interval":           "not readable over the client protocol: 2m as shipped (compose/nats's stock and os profiles), always with the fsync profile",
		brokers.FsyncKey:          "no, as shipped: JetStream fsyncs every sync_interval (2m); yes with sync_interval: always (the stack's fsync profile), which the client cannot verify",
		brokers.ReplicatedKey:     "no: the driver's streams have one replica",
	}
	p, err := b.conn()
	if err != nil {
		return out, err
	}
	out["server"] = "NATS " + p.nc.ConnectedServerVersion()
	if topic == "" {
		return out, nil
	}
	s, err := p.js.Stream(ctx, StreamName(topic, 0))
	if err != nil {
		return out, fmt.Errorf("nats: stream of %s: %w", topic, err)
	}
	c := s.CachedInfo().Config
	out["storage"] = fmt.Sprintf("%s (read from the server: %s)", c.Storage, c.Name)
	out["replicas"] = fmt.Sprint(c.Replicas)
	out["duplicates window"] = c.Duplicates.String()
	if c.Replicas > 1 {
		out[brokers.ReplicatedKey] = fmt.Sprintf("yes: streams of %d replicas acknowledge once a majority stored the message", c.Replicas)
	}
	return out, nil
}
