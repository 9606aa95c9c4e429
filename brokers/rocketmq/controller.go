package rocketmq

// Remoting calls of controller mode (RocketMQ 5's automatic master
// switch) that the driver's durability report and the local stack use:
// the controller's SyncStateSet of a broker group, and a broker's
// configuration changed at run time.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Request codes (org.apache.rocketmq.remoting.protocol.RequestCode).
const (
	rmqUpdateBrokerConfig   = 25
	rmqControllerSyncStates = 1006 // CONTROLLER_GET_SYNC_STATE_DATA
)

// SyncState is a broker group as the controller sees it.
type SyncState struct {
	Master string // the master's address ("" while there is none)
	// InSync are the addresses of the replicas in the SyncStateSet (the
	// master among them): the ones a send waits for with
	// allAckInSyncStateSet, and the only ones the controller elects from
	// unless enableElectUncleanMaster. NotInSync are the others it knows.
	InSync, NotInSync []string
	MasterEpoch       int64
}

// SyncStateSet asks the controller at addr for group's SyncStateSet
// (what `mqadmin getSyncStateSet` prints).
func (r *Remoting) SyncStateSet(ctx context.Context, controller, group string) (SyncState, error) {
	body, err := json.Marshal([]string{group})
	if err != nil {
		return SyncState{}, err
	}
	resp, err := r.call(ctx, controller, request{rmqControllerSyncStates, nil, body})
	if err != nil {
		return SyncState{}, fmt.Errorf("rocketmq controller %s: SyncStateSet of %s: %w", controller, group, err)
	}
	type member struct {
		BrokerAddress string `json:"brokerAddress"`
	}
	var info struct {
		ReplicasInfoTable map[string]struct {
			MasterAddress     string   `json:"masterAddress"`
			MasterEpoch       int64    `json:"masterEpoch"`
			InSyncReplicas    []member `json:"inSyncReplicas"`
			NotInSyncReplicas []member `json:"notInSyncReplicas"`
		} `json:"replicasInfoTable"`
	}
	if err := json.Unmarshal(FastJSONToJSON(resp), &info); err != nil {
		return SyncState{}, fmt.Errorf("rocketmq controller %s: SyncStateSet of %s: %w (body %.200q)", controller, group, err, resp)
	}
	g, ok := info.ReplicasInfoTable[group]
	if !ok {
		return SyncState{}, fmt.Errorf("rocketmq controller %s: no broker group %s", controller, group)
	}
	out := SyncState{Master: g.MasterAddress, MasterEpoch: g.MasterEpoch}
	for _, m := range g.InSyncReplicas {
		out.InSync = append(out.InSync, m.BrokerAddress)
	}
	for _, m := range g.NotInSyncReplicas {
		out.NotInSync = append(out.NotInSync, m.BrokerAddress)
	}
	sort.Strings(out.InSync)
	sort.Strings(out.NotInSync)
	return out, nil
}

// UpdateBrokerConfig changes settings of a running broker
// (UPDATE_BROKER_CONFIG, what `mqadmin updateBrokerConfig` sends); the
// broker applies them at once and writes them to its configuration file.
func (r *Remoting) UpdateBrokerConfig(ctx context.Context, broker string, kv map[string]string) error {
	var b strings.Builder
	for k, v := range kv {
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	if _, err := r.call(ctx, broker, request{rmqUpdateBrokerConfig, nil, []byte(b.String())}); err != nil {
		return fmt.Errorf("rocketmq broker %s: update broker config: %w", broker, err)
	}
	return nil
}
