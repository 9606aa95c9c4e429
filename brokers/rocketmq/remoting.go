package rocketmq

// One-shot remoting calls for the driver's admin needs and the local
// stack's readiness check: the name server's cluster table, a topic's
// route and a broker's runtime info (admin.go: topics, users, ACLs).
// rocketmq-client-go exposes few of them, and its own connections cannot
// verify a server: with TLS on, it dials with InsecureSkipVerify and no
// client certificate (internal/remote/tcp_conn.go of the module). The
// frame format and the persistent connections are in conn.go.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
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

// Remoting reaches name servers and brokers as the configuration says:
// over TLS (rocketmq.tls, or any of the TLS files, verified against the
// CA file or the system roots) and with every request signed by the
// access key. The driver's own admin calls, producer and consumer, and the
// local stack's readiness check all go through it, so nothing of the
// driver dials plain TCP or sends an unsigned request when the
// configuration asks otherwise.
type Remoting struct {
	tls   *tls.Config // nil: plaintext
	creds primitive.Credentials
	cfg   config.Config // what Explain reads a refusal against
}

// NewRemoting checks cfg's TLS files and credentials and returns the
// Remoting they describe.
func NewRemoting(cfg config.Config) (*Remoting, error) {
	r := &Remoting{cfg: cfg, creds: primitive.Credentials{AccessKey: cfg.Get(SettingAccessKey), SecretKey: cfg.Get(SettingSecretKey)}}
	if UsesTLS(cfg) {
		tc, err := tlsfiles.Config(cfg, tlsKeys)
		if err != nil {
			return nil, err
		}
		r.tls = tc
	}
	return r, nil
}

// dial connects to addr, with the TLS handshake done before ctx ends.
func (r *Remoting) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || r.tls == nil {
		return nc, err
	}
	tc := r.tls.Clone()
	if tc.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		tc.ServerName = host
	}
	conn := tls.Client(nc, tc)
	if err := conn.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return conn, nil
}

// ClusterInfo sends GET_BROKER_CLUSTER_INFO to a name server.
func (r *Remoting) ClusterInfo(ctx context.Context, namesrv string) (*ClusterInfoResult, error) {
	body, err := r.call(ctx, namesrv, request{rmqGetBrokerClusterInfo, nil, nil})
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
func (r *Remoting) BrokerVersion(ctx context.Context, broker string) (string, error) {
	body, err := r.call(ctx, broker, request{rmqGetBrokerRuntimeInfo, nil, nil})
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

// request is one remoting command: its request code, header fields and
// body.
type request struct {
	code int
	ext  map[string]string
	body []byte
}

// call sends one signed request over a connection of its own and returns
// the response body; a non-zero response code is an error carrying the
// server's remark. For the occasional admin call; consumers and the
// producer keep a conn. A failure is explained (Explain).
func (r *Remoting) call(ctx context.Context, addr string, req request) ([]byte, error) {
	out, err := r.callOnce(ctx, addr, req)
	return out, Explain(r.cfg, err, r.tls != nil)
}

func (r *Remoting) callOnce(ctx context.Context, addr string, req request) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	conn, err := r.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	h := remotingHeader{Code: req.code, Language: "GO", Version: remotingVersion, Opaque: rmqOpaque.Add(1), ExtFields: signed(r.creds, req.ext, req.body)}
	if err := writeFrame(conn, h, req.body); err != nil {
		return nil, err
	}
	for first := true; ; first = false {
		f, err := readFrame(conn)
		if err != nil {
			if first && errors.Is(err, io.EOF) {
				return nil, &closedError{err: err}
			}
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

// closedError is a server that closed the connection before answering
// the first request on it: what a TLS-enforcing server does with a
// plaintext client.
type closedError struct{ err error }

// Error says what the server did, with the read's error.
func (e *closedError) Error() string {
	return "the server closed the connection without answering the first request (" + e.err.Error() + ")"
}

// Unwrap returns the read's error.
func (e *closedError) Unwrap() error { return e.err }

// RemotingError is a response with a non-zero code: the server answered
// but refused or failed the request.
type RemotingError struct {
	Code   int
	Remark string
}

// Error gives the response code and the server's remark.
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
func (r *Remoting) RouteQueues(ctx context.Context, namesrv, topic string) (int, error) {
	body, err := r.call(ctx, namesrv, request{rmqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil})
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
