package rocketmq

import (
	"slices"
	"testing"
)

func TestParseMasters(t *testing.T) {
	body := `{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:50911",1:"127.0.0.1:50921"},"brokerName":"broker-a","cluster":"DefaultCluster"},` +
		`"broker-b":{"brokerAddrs":{1:"10.0.0.2:10911", 0:"10.0.0.1:10911"},"brokerName":"broker-b"},"broker-c":{"brokerAddrs":{"0":"10.0.0.3:10911"}}},` +
		`"clusterAddrTable":{"DefaultCluster":["broker-a","broker-b"]}}`
	got := parseMasters([]byte(body))
	want := []string{"127.0.0.1:50911", "10.0.0.1:10911", "10.0.0.3:10911"}
	if !slices.Equal(got, want) {
		t.Fatalf("parseMasters = %v, want %v", got, want)
	}
}
