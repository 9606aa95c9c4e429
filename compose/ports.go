package compose

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The stack's ports lie inside Linux's default ephemeral range
// (32768–60999), from which the kernel picks the local port of every
// outgoing connection and of every listener bound to port 0 (an Erlang
// CLI's distribution listener, a JVM's connection to its name server). A
// service then finds its port taken and exits during startup
// (eaddrinuse). Up therefore adds its variant's ports to the kernel's
// reserved list, which only keeps the kernel from handing them out, and
// checks each port before a service starts, naming what holds it.

// reservedPortsFile is the kernel's list of ports it never picks itself
// (net.ipv4.ip_local_reserved_ports); writable by root only.
const reservedPortsFile = "/proc/sys/net/ipv4/ip_local_reserved_ports"

// reservePorts adds the ports of every service of e's variant to the
// kernel's reserved list. Without the permission (not root) or the file
// it does nothing: the check before each start still names a holder.
func reservePorts(e *Env) error {
	var want []int
	for _, s := range Services(e.Variant) {
		if p, ok := s.(Porter); ok {
			for _, port := range p.Ports(e) {
				want = append(want, port.Port)
			}
		}
	}
	raw, err := os.ReadFile(reservedPortsFile)
	if err != nil {
		return nil
	}
	list := strings.TrimSpace(string(raw))
	have, err := parsePortRanges(list)
	if err != nil {
		return fmt.Errorf("read %s: %w", reservedPortsFile, err)
	}
	added := false
	for _, p := range want {
		if !have(p) {
			list += "," + strconv.Itoa(p)
			added = true
		}
	}
	if !added {
		return nil
	}
	err = os.WriteFile(reservedPortsFile, []byte(strings.TrimPrefix(list, ",")+"\n"), 0o644)
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return nil
	}
	return err
}

// parsePortRanges reads the kernel's "8080,50000-50010" form.
func parsePortRanges(s string) (func(int) bool, error) {
	type span struct{ lo, hi int }
	var spans []span
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil {
			return nil, fmt.Errorf("bad port range %q", f)
		}
		spans = append(spans, span{a, b})
	}
	return func(p int) bool {
		return slices.ContainsFunc(spans, func(r span) bool { return r.lo <= p && p <= r.hi })
	}, nil
}

// portWait bounds how long a start waits for a port held by a socket of
// another process to be let go.
const portWait = 15 * time.Second

// portsFree waits until each of s's ports can be bound on loopback, or
// one held by s's own processes (a cluster's running nodes): a service
// started onto a taken port exits during startup with nothing but
// "address in use" to say. A port still taken after portWait fails the
// start, naming the processes that hold it.
func portsFree(ctx context.Context, e *Env, s Service) error {
	p, ok := s.(Porter)
	if !ok {
		return nil
	}
	leaders := livePIDs(e, s)
	deadline := time.Now().Add(portWait)
	for _, port := range p.Ports(e) {
		if port.Shared {
			continue // the host's one instance serves others too (epmd)
		}
		for {
			holders, err := portTaken(port.Port, leaders)
			if err != nil || holders == "" {
				break // free, ours, or not to be told: the start says the rest
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("port %d (%s) is taken by %s: stop that process (or end its connection) and run again", port.Port, port.What, holders)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return nil
}

// portTaken describes what keeps port from being bound on 127.0.0.1:
// empty when it binds, or when every socket on it belongs to the process
// trees of leaders.
func portTaken(port int, leaders []int) (string, error) {
	l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil {
		l.Close()
		return "", nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return "", err
	}
	socks, err := socketsOnPort(port)
	if err != nil {
		return "", err
	}
	mine := treeSockets(leaders)
	var held []string
	for _, sk := range socks {
		if mine[sk.inode] || sk.inode == 0 {
			continue // ours, or a connection's TIME_WAIT (a listener binds over it)
		}
		if pid := socketOwner(sk.inode); pid > 0 {
			cmd, _ := commandLine(pid)
			held = append(held, fmt.Sprintf("pid %d (%s, %s)", pid, truncate(cmd, 80), sk.state))
		} else {
			held = append(held, "a socket of no process this user can read ("+sk.state+")")
		}
	}
	if len(held) == 0 {
		if len(socks) > 0 {
			return "", nil // every socket on it is ours
		}
		return "a socket not listed in /proc/net/tcp (another network namespace?)", nil
	}
	return strings.Join(held, "; "), nil
}

type portSocket struct {
	inode uint64
	state string
}

// tcpStates names /proc/net/tcp's state codes.
var tcpStates = map[string]string{
	"01": "an established connection", "02": "a connection opening", "03": "a connection opening",
	"04": "a connection closing", "05": "a connection closing", "06": "a connection in TIME_WAIT",
	"07": "a closed socket", "08": "a connection closing", "09": "a connection closing",
	"0A": "listening", "0B": "a connection closing",
}

// socketsOnPort lists the IPv4 and IPv6 TCP sockets whose local port is
// port, in any state.
func socketsOnPort(port int) ([]portSocket, error) {
	var out []portSocket
	err := procTCP(func(addr netip.AddrPort, state string, inode uint64) {
		if int(addr.Port()) != port {
			return
		}
		name := tcpStates[state]
		if name == "" {
			name = "state " + state
		}
		out = append(out, portSocket{inode, name})
	})
	return out, err
}

// socketOwner finds the process holding a socket inode (0: none this user
// can read; a socket in TIME_WAIT has none).
func socketOwner(inode uint64) int {
	if inode == 0 {
		return 0
	}
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if socketInodes([]int{pid})[inode] {
			return pid
		}
	}
	return 0
}
