package rocketmq

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/brokers"
)

var _ brokers.DurabilityReporter = (*Broker)(nil)

// rmqGetBrokerConfig is RequestCode.GET_BROKER_CONFIG: the broker answers
// with its whole configuration as a properties text.
const rmqGetBrokerConfig = 26

// BrokerConfig asks a broker for its configuration (GET_BROKER_CONFIG,
// what `mqadmin getBrokerConfig` prints).
func (r *Remoting) BrokerConfig(ctx context.Context, broker string) (map[string]string, error) {
	body, err := r.call(ctx, broker, rmqGetBrokerConfig, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("rocketmq broker %s: get broker config: %w", broker, err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && !strings.HasPrefix(k, "#") {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rocketmq broker %s: get broker config: empty answer", broker)
	}
	return out, nil
}

// Durability implements brokers.DurabilityReporter with the first master
// broker's flushDiskType and brokerRole (GET_BROKER_CONFIG over remoting)
// and the send mode of the driver. SYNC_FLUSH answers a send after the
// commit log was flushed to disk; ASYNC_FLUSH answers from the page cache
// and flushes every flushIntervalCommitLog ms. brokerRole SYNC_MASTER
// would also wait for a slave; ASYNC_MASTER does not. The topic does not
// change any of this.
func (b *Broker) Durability(ctx context.Context, _ string) (map[string]string, error) {
	out := map[string]string{"send": "synchronous (the client waits for the broker's SEND_OK)"}
	masters, err := b.masters(ctx)
	if err != nil {
		return out, err
	}
	cfg, err := b.rm.BrokerConfig(ctx, masters[0])
	if err != nil {
		return out, err
	}
	for _, k := range []string{"flushDiskType", "brokerRole", "flushIntervalCommitLog", "syncFlushTimeout"} {
		if v, ok := cfg[k]; ok {
			out[k] = v
		}
	}
	switch cfg["flushDiskType"] {
	case "SYNC_FLUSH":
		out[brokers.FsyncKey] = "yes: flushDiskType=SYNC_FLUSH answers a send after the commit log was flushed"
	case "ASYNC_FLUSH":
		out[brokers.FsyncKey] = "no: flushDiskType=ASYNC_FLUSH answers from the page cache, flushed every flushIntervalCommitLog ms"
	default:
		out[brokers.FsyncKey] = "unknown: flushDiskType=" + cfg["flushDiskType"]
	}
	return out, nil
}
