package service

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// LocalPorts returns the local ports of the TCP connections that the
// processes pids hold to a server listening on remotePort (on any
// address). PostgreSQL lists a client's port in pg_stat_activity, so
// these name the service's own backends without trusting anything the
// service set (its application_name may be anything). Linux only: it
// reads /proc.
func LocalPorts(pids []int, remotePort int) ([]int, error) {
	inodes := map[string]bool{}
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // it exited meanwhile
		}
		for _, e := range ents {
			l, err := os.Readlink(dir + "/" + e.Name())
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var out []int
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ports, err := tcpPorts(f, inodes, remotePort)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		out = append(out, ports...)
	}
	return out, nil
}

// tcpPorts reads one /proc/net/tcp table: the local ports of the
// connections whose socket inode is in inodes and whose remote port is
// remotePort.
func tcpPorts(file string, inodes map[string]bool, remotePort int) ([]int, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	var out []int
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !inodes[fs[9]] {
			continue
		}
		lp, ok1 := hexPort(fs[1])
		rp, ok2 := hexPort(fs[2])
		if ok1 && ok2 && rp == remotePort {
			out = append(out, lp)
		}
	}
	return out, sc.Err()
}

// hexPort reads the port of "0100007F:D8F0".
func hexPort(addr string) (int, bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0, false
	}
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	return int(p), err == nil
}
