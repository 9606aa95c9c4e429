package compose

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Port is a TCP port a service of the native stack listens on.
type Port struct {
	Port int
	What string // "AMQP", "Erlang distribution", "HA replication" …
	// AllInterfaces is empty for a port bound to loopback. For a port the
	// service cannot bind to loopback it says why and what guards it.
	AllInterfaces string
	// Shared marks a port the host's one server of it serves to every
	// service that needs it (epmd, Erlang's port mapper): it may be held
	// before a start, and outlives a stop.
	Shared bool
}

// Porter is implemented by services that know the ports they (and the
// helpers they start, such as epmd) listen on.
type Porter interface {
	Ports(e *Env) []Port
}

// Listening is one listening socket of a service, read from the kernel.
type Listening struct {
	Addr netip.AddrPort
	// Allowed is the documented reason a non-loopback address is
	// accepted; empty otherwise.
	Allowed string
}

// Loopback reports whether only this host can connect.
func (l Listening) Loopback() bool { return l.Addr.Addr().Unmap().IsLoopback() }

// String is the address as status prints it, "*:port" for every
// interface.
func (l Listening) String() string {
	a := l.Addr.Addr().Unmap()
	if a.IsUnspecified() {
		return "*:" + strconv.Itoa(int(l.Addr.Port())) // every interface, IPv4 and IPv6 alike
	}
	return netip.AddrPortFrom(a, l.Addr.Port()).String()
}

// Listeners finds the TCP sockets a service listens on: every listening
// socket of its processes (the process groups and sessions its pid files
// name, read from /proc/PID/fd when permitted) and every listening socket
// on one of its known ports (which also finds helpers outside its process
// group, and a Docker stack's published ports).
func Listeners(e *Env, s Service) ([]Listening, error) {
	socks, err := listeningSockets()
	if err != nil {
		return nil, err
	}
	known := map[int]Port{}
	if p, ok := s.(Porter); ok {
		for _, port := range p.Ports(e) {
			known[port.Port] = port
		}
	}
	owned := treeSockets(livePIDs(e, s))
	var out []Listening
	for inode, addr := range socks {
		port, isKnown := known[int(addr.Port())]
		if !owned[inode] && !isKnown {
			continue
		}
		l := Listening{Addr: addr}
		if !l.Loopback() && isKnown {
			l.Allowed = port.AllInterfaces
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Listening) int {
		if c := int(a.Addr.Port()) - int(b.Addr.Port()); c != 0 {
			return c
		}
		return a.Addr.Addr().Compare(b.Addr.Addr())
	})
	return out, nil
}

// listeningSockets reads /proc/net/tcp and tcp6: socket inode → local
// address of every socket in state LISTEN.
func listeningSockets() (map[uint64]netip.AddrPort, error) {
	out := map[uint64]netip.AddrPort{}
	err := procTCP(func(addr netip.AddrPort, state string, inode uint64) {
		if state == "0A" { // TCP_LISTEN
			out[inode] = addr
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read listening sockets: %w", err)
	}
	return out, nil
}

// procTCP calls visit with the local address, the state code (hex, as
// the kernel prints it) and the inode of every TCP socket in
// /proc/net/tcp and tcp6 (the latter skipped when IPv6 is disabled).
func procTCP(visit func(addr netip.AddrPort, state string, inode uint64)) error {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			if f == "/proc/net/tcp6" && os.IsNotExist(err) {
				continue // IPv6 disabled
			}
			return err
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			addr, err := parseProcAddr(fields[1])
			inode, ierr := strconv.ParseUint(fields[9], 10, 64)
			if err != nil || ierr != nil {
				continue
			}
			visit(addr, fields[3], inode)
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read %s: %w", f, err)
		}
	}
	return nil
}

// parseProcAddr decodes "0100007F:D8A0" (IPv4) or 32 hex digits and a port
// (IPv6): the address is printed as 32-bit words in host byte order.
func parseProcAddr(s string) (netip.AddrPort, error) {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	raw, err := hex.DecodeString(host)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// treeSockets lists the socket inodes the process trees of leaders hold
// open (processTree).
func treeSockets(leaders []int) map[uint64]bool {
	var pids []int
	for _, q := range processTree(leaders) {
		pids = append(pids, q.pid)
	}
	return socketInodes(pids)
}

// socketInodes lists the socket inodes the processes hold open. A process
// whose descriptors cannot be read (another user's, without root) is
// skipped: its known ports still find it.
func socketInodes(pids []int) map[uint64]bool {
	out := map[uint64]bool{}
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil || !strings.HasPrefix(target, "socket:[") {
				continue
			}
			if n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]"), 10, 64); err == nil {
				out[n] = true
			}
		}
	}
	return out
}
