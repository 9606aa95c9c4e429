package redis

import (
	"context"
	"strings"

	"github.com/inboxbench/inboxbench/brokers"
)

var _ brokers.DurabilityReporter = (*Broker)(nil)

// Durability implements brokers.DurabilityReporter: the server's
// appendonly and appendfsync (CONFIG GET), its version and its role
// (INFO), and the verdicts. A stream has no setting of its own.
func (b *Broker) Durability(ctx context.Context, _ string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range []string{"appendonly", "appendfsync"} {
		m, err := b.client.ConfigGet(ctx, k).Result()
		if err != nil {
			return out, b.errorf("CONFIG GET %s: %w", k, err)
		}
		out[k] = m[k]
	}
	info, err := b.client.Info(ctx, "server", "replication").Result()
	if err != nil {
		return out, b.errorf("INFO: %w", err)
	}
	out["server"] = "Redis " + infoField(info, "redis_version")
	out[brokers.FsyncKey] = fsyncVerdict(out["appendonly"], out["appendfsync"])
	out[brokers.ReplicatedKey] = "no: the reply to XADD comes from one server (" + infoField(info, "connected_slaves") +
		" replicas connected; the driver does not WAIT for them)"
	return out, nil
}

// fsyncVerdict says what the reply to an XADD means on disk.
func fsyncVerdict(appendonly, appendfsync string) string {
	if !strings.EqualFold(appendonly, "yes") {
		return "no: appendonly no — no append-only file; an acknowledged XADD is in memory until the next RDB snapshot"
	}
	switch strings.ToLower(appendfsync) {
	case "always":
		return "yes: appendfsync always — the append-only file is written and fsync'ed before the reply"
	case "everysec":
		return "no: appendfsync everysec — written to the append-only file before the reply (a crash of redis-server loses nothing acknowledged), fsync'ed every second (a crash of the host loses up to 1-2 s)"
	}
	return "no: appendfsync " + appendfsync + " — written to the append-only file before the reply, flushed to disk when the kernel decides"
}
