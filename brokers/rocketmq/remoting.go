package rocketmq

// One-shot remoting calls for the driver's admin needs and the local
// stack's readiness check: the name server's cluster table, a topic's
// route and a broker's runtime info. rocketmq-client-go exposes none of
// them (the cluster call is commented out in admin.Admin; the
// implementation is internal). The frame format and the consumer's
// persistent connections are in conn.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// ClusterInfoResult is the name server's answer to
// GET_BROKER_CLUSTER_INFO.
type ClusterInfoResult struct {
	BrokerAddrTable map[string]struct {
		Cluster     string            `json:"cluster"`
		BrokerName  string            `json:"brokerName"`
		BrokerAddrs map[string]string `json:"brokerAddrs"` // broker id → host:port
	} `json:"brokerAddrTable"`
	ClusterAddrTable map[string][]string `json:"clusterAddrTable"`
}

// Masters lists the master (broker id 0) addresses, sorted.
func (ci *ClusterInfoResult) Masters() []string {
	var masters []string
	for _, b := range ci.BrokerAddrTable {
		if a, ok := b.BrokerAddrs["0"]; ok {
			masters = append(masters, a)
		}
	}
	sort.Strings(masters)
	return masters
}

// BrokerAddrs lists every registered broker address, masters (id 0) first.
func (ci *ClusterInfoResult) BrokerAddrs() []string {
	var masters, others []string
	for _, b := range ci.BrokerAddrTable {
		for id, a := range b.BrokerAddrs {
			if id == "0" {
				masters = append(masters, a)
			} else {
				others = append(others, a)
			}
		}
	}
	sort.Strings(masters)
	sort.Strings(others)
	return append(masters, others...)
}

// Remoting request codes (org.apache.rocketmq.remoting.protocol.RequestCode).
const (
	rmqGetBrokerRuntimeInfo = 28
	rmqGetBrokerClusterInfo = 106
	rmqGetRouteInfoByTopic  = 105
)

// ClusterInfo sends GET_BROKER_CLUSTER_INFO to a name server.
func ClusterInfo(ctx context.Context, namesrv string) (*ClusterInfoResult, error) {
	body, err := remotingCall(ctx, namesrv, rmqGetBrokerClusterInfo, nil)
	if err != nil {
		return nil, fmt.Errorf("rocketmq name server %s: cluster info: %w", namesrv, err)
	}
	var ci ClusterInfoResult
	if err := json.Unmarshal(FastJSONToJSON(body), &ci); err != nil {
		return nil, fmt.Errorf("rocketmq name server %s: cluster info: %w (body %.200q)", namesrv, err, body)
	}
	return &ci, nil
}

// BrokerVersion asks a broker for its runtime info and returns its
// version ("5.3.3" from brokerVersionDesc "V5_3_3").
func BrokerVersion(ctx context.Context, broker string) (string, error) {
	body, err := remotingCall(ctx, broker, rmqGetBrokerRuntimeInfo, nil)
	if err != nil {
		return "", fmt.Errorf("rocketmq broker %s: runtime info: %w", broker, err)
	}
	var kv struct {
		Table map[string]string `json:"table"`
	}
	if err := json.Unmarshal(FastJSONToJSON(body), &kv); err != nil {
		return "", fmt.Errorf("rocketmq broker %s: runtime info: %w", broker, err)
	}
	v := kv.Table["brokerVersionDesc"]
	v = strings.ReplaceAll(strings.TrimPrefix(v, "V"), "_", ".")
	return v, nil
}

var rmqOpaque atomic.Int32

type remotingHeader struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int               `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
}

// remotingVersion is the protocol version the driver announces (the one
// rocketmq-client-go sends).
const remotingVersion = 317

// remotingCall sends one request over a connection of its own and returns
// the response body; a non-zero response code is an error carrying the
// server's remark. For the occasional admin call; consumers keep a conn.
func remotingCall(ctx context.Context, addr string, code int, ext map[string]string) ([]byte, error) {
	return remotingCallBody(ctx, addr, code, ext, nil)
}

// remotingCallBody is remotingCall with a request body.
func remotingCallBody(ctx context.Context, addr string, code int, ext map[string]string, body []byte) ([]byte, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	h := remotingHeader{Code: code, Language: "GO", Version: remotingVersion, Opaque: rmqOpaque.Add(1), ExtFields: ext}
	if err := writeFrame(conn, h, body); err != nil {
		return nil, err
	}
	for {
		f, err := readFrame(conn)
		if err != nil {
			return nil, err
		}
		if f.Opaque != h.Opaque || f.Flag&flagResponse == 0 {
			continue // not our response (e.g. a server-initiated request)
		}
		if f.Code != 0 {
			return nil, &RemotingError{Code: f.Code, Remark: f.Remark}
		}
		return f.body, nil
	}
}

// RemotingError is a response with a non-zero code: the server answered
// but refused or failed the request.
type RemotingError struct {
	Code   int
	Remark string
}

func (e *RemotingError) Error() string {
	return fmt.Sprintf("remoting response code %d: %s", e.Code, e.Remark)
}

// fastJSONKeyRE finds the unquoted integer map keys fastjson writes
// ({0:"127.0.0.1:10911"}), which encoding/json rejects.
var fastJSONKeyRE = regexp.MustCompile(`([{,])(-?\d+):`)

// FastJSONToJSON quotes those keys so encoding/json can decode the body.
func FastJSONToJSON(b []byte) []byte {
	return fastJSONKeyRE.ReplaceAll(bytes.TrimSpace(b), []byte(`$1"$2":`))
}

// RouteQueues asks a name server for topic's route and returns its number
// of write queues (0 when the name server does not route the topic yet).
func RouteQueues(ctx context.Context, namesrv, topic string) (int, error) {
	body, err := remotingCall(ctx, namesrv, rmqGetRouteInfoByTopic, map[string]string{"topic": topic})
	if err != nil {
		var re *RemotingError
		if errors.As(err, &re) {
			return 0, nil // "no route" is an error answer: not routed yet
		}
		return 0, err
	}
	var route struct {
		QueueDatas []struct {
			WriteQueueNums int `json:"writeQueueNums"`
		} `json:"queueDatas"`
	}
	if err := json.Unmarshal(FastJSONToJSON(body), &route); err != nil {
		return 0, fmt.Errorf("rocketmq name server %s: route of %s: %w", namesrv, topic, err)
	}
	n := 0
	for _, q := range route.QueueDatas {
		n += q.WriteQueueNums
	}
	return n, nil
}
