package rocketmq

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
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
	body, err := r.call(ctx, broker, request{rmqGetBrokerConfig, nil, nil})
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
// broker's settings (GET_BROKER_CONFIG over remoting) and the send mode of
// the driver. SYNC_FLUSH answers a send after the commit log was flushed
// to disk; ASYNC_FLUSH answers from the page cache and flushes every
// flushIntervalCommitLog ms. brokerRole SYNC_MASTER would also wait for a
// slave; ASYNC_MASTER does not. In controller mode (enableControllerMode)
// the controller elects the master from the SyncStateSet, the replicas
// that caught up with it: with allAckInSyncStateSet a send is answered
// once every one of them has the message (inSyncReplicas otherwise), and
// minInSyncReplicas is the fewest the set may shrink to before sends are
// refused; the report adds the group's brokers and the controller's
// SyncStateSet. The topic does not change any of this.
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
	switch {
	case cfg["enableControllerMode"] == "true":
		b.replication(ctx, cfg, out)
	case cfg["brokerRole"] == "SYNC_MASTER":
		out[brokers.ReplicatedKey] = "yes: brokerRole=SYNC_MASTER answers a send once a slave has it"
	default:
		out[brokers.ReplicatedKey] = "no: brokerRole=" + cfg["brokerRole"] + ", the master alone answers a send"
	}
	return out, nil
}

// replication adds controller mode's settings, the master's group and
// its SyncStateSet to out.
func (b *Broker) replication(ctx context.Context, cfg, out map[string]string) {
	for _, k := range []string{"enableControllerMode", "allAckInSyncStateSet", "inSyncReplicas", "minInSyncReplicas", "haMaxTimeSlaveNotCatchup"} {
		if v, ok := cfg[k]; ok {
			out[k] = v
		}
	}
	group := cfg["brokerName"]
	if ci, err := b.clusterInfo(ctx); err == nil {
		for _, g := range ci.BrokerAddrTable {
			if g.BrokerName == group {
				out["replicas"] = fmt.Sprintf("%d brokers in group %s (1 master)", len(g.BrokerAddrs), group)
			}
		}
	}
	ctl := strings.Split(cfg["controllerAddr"], ";")[0]
	if ctl == "" {
		return
	}
	sync, err := b.rm.SyncStateSet(ctx, ctl, group)
	if err != nil {
		out["in-sync replicas"] = "unknown: " + err.Error()
		return
	}
	out["in-sync replicas"] = fmt.Sprintf("%d (SyncStateSet of %s: %s)", len(sync.InSync), group, strings.Join(sync.InSync, ", "))
	if cfg["allAckInSyncStateSet"] == "true" {
		out["replication"] = "a send is answered once every replica of the SyncStateSet has it (at least minInSyncReplicas=" + cfg["minInSyncReplicas"] + "); the controller elects the next master from the set"
	} else {
		out["replication"] = "a send is answered once inSyncReplicas=" + cfg["inSyncReplicas"] + " replicas have it (allAckInSyncStateSet=false): a master switch can lose what the new master had not copied"
	}
	min, _ := strconv.Atoi(cfg["minInSyncReplicas"])
	switch {
	case cfg["allAckInSyncStateSet"] != "true" && cfg["inSyncReplicas"] == "1":
		out[brokers.ReplicatedKey] = "no: allAckInSyncStateSet=false and inSyncReplicas=1, the master alone answers a send"
	case cfg["allAckInSyncStateSet"] != "true":
		out[brokers.ReplicatedKey] = "yes: inSyncReplicas=" + cfg["inSyncReplicas"] + " replicas have a send before it is answered"
	case min < 2:
		out[brokers.ReplicatedKey] = "no: allAckInSyncStateSet=true, but minInSyncReplicas=" + cfg["minInSyncReplicas"] + " lets the master alone answer once the SyncStateSet shrinks to it"
	default:
		out[brokers.ReplicatedKey] = "yes: every replica of the SyncStateSet has a send before it is answered, at least minInSyncReplicas=" + cfg["minInSyncReplicas"]
	}
}
