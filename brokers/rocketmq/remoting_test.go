package rocketmq

import (
	"encoding/json"
	"testing"
)

// TestFastjsonToJSON needs no server: the name server's cluster info uses
// fastjson's unquoted integer keys.
func TestFastjsonToJSON(t *testing.T) {
	body := []byte(`{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:50911",1:"127.0.0.1:50921"},"brokerName":"broker-a","cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}`)
	var ci ClusterInfoResult
	if err := json.Unmarshal(FastJSONToJSON(body), &ci); err != nil {
		t.Fatal(err)
	}
	got := ci.BrokerAddrs()
	if len(got) != 2 || got[0] != "127.0.0.1:50911" || got[1] != "127.0.0.1:50921" {
		t.Fatalf("BrokerAddrs = %v, want master 127.0.0.1:50911 first, then the slave", got)
	}
}

func TestMasters(t *testing.T) {
	body := []byte(`{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:50911",1:"127.0.0.1:50921"}},"broker-b":{"brokerAddrs":{1:"127.0.0.1:50931"}}}}`)
	var ci ClusterInfoResult
	if err := json.Unmarshal(FastJSONToJSON(body), &ci); err != nil {
		t.Fatal(err)
	}
	if got := ci.Masters(); len(got) != 1 || got[0] != "127.0.0.1:50911" {
		t.Fatalf("Masters = %v, want only the id-0 broker", got)
	}
}
