package rocketmq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"regexp"
	"time"
)

// reqGetBrokerClusterInfo is the remoting request code of the name
// server's cluster table (the one `mqadmin clusterList` uses). The Go
// client exposes no call for it (it is commented out in admin.Admin and
// the implementation is in an internal package), so this file speaks the
// few bytes of the remoting protocol it needs.
const reqGetBrokerClusterInfo = 106

// brokerAddrsRE and masterRE pick master addresses out of the answer. The
// name server serialises Map<Long,String> with unquoted numeric keys
// ({0:"host:port"}), which encoding/json rejects, so the body is matched
// instead of decoded.
var (
	brokerAddrsRE = regexp.MustCompile(`"brokerAddrs"\s*:\s*\{([^}]*)\}`)
	masterRE      = regexp.MustCompile(`(?:^|[{,])\s*"?0"?\s*:\s*"([^"]+)"`)
)

// clusterMasters asks one name server for its cluster info and returns the
// address of every master broker (broker id 0).
func clusterMasters(ctx context.Context, namesrv string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", namesrv)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)

	header, _ := json.Marshal(map[string]any{
		"code": reqGetBrokerClusterInfo, "language": "GO", "version": 317,
		"opaque": int32(time.Now().UnixNano() & 0x7fffffff), "flag": 0, "extFields": map[string]string{},
	})
	frame := make([]byte, 8+len(header))
	binary.BigEndian.PutUint32(frame[0:4], uint32(4+len(header)))
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(header))) // high byte 0: JSON header
	copy(frame[8:], header)
	if _, err := conn.Write(frame); err != nil {
		return nil, fmt.Errorf("send cluster-info request: %w", err)
	}

	var lens [8]byte
	if _, err := io.ReadFull(conn, lens[:]); err != nil {
		return nil, fmt.Errorf("read cluster-info answer: %w", err)
	}
	total := binary.BigEndian.Uint32(lens[0:4])
	hlen := binary.BigEndian.Uint32(lens[4:8]) & 0xffffff
	if total > 64<<20 || hlen+4 > total {
		return nil, fmt.Errorf("cluster-info answer has a bad frame (length %d, header %d)", total, hlen)
	}
	rest := make([]byte, total-4)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return nil, fmt.Errorf("read cluster-info answer: %w", err)
	}
	var resp struct {
		Code   int    `json:"code"`
		Remark string `json:"remark"`
	}
	if err := json.Unmarshal(rest[:hlen], &resp); err != nil {
		return nil, fmt.Errorf("cluster-info answer header: %w", err)
	}
	if resp.Code != 0 {
		return nil, fmt.Errorf("cluster-info request failed: code %d %s", resp.Code, resp.Remark)
	}
	return parseMasters(rest[hlen:]), nil
}

func parseMasters(body []byte) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range brokerAddrsRE.FindAllSubmatch(body, -1) {
		for _, a := range masterRE.FindAllSubmatch(m[1], -1) {
			if addr := string(a[1]); !seen[addr] {
				seen[addr] = true
				out = append(out, addr)
			}
		}
	}
	return out
}
