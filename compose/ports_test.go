package compose

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPortTakenNamesTheHolder: a port another process's socket holds is
// described with that process's pid; a port held by the service's own
// process tree, or free, is not.
func TestPortTakenNamesTheHolder(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	got, err := portTaken(port, nil)
	if err != nil || !strings.Contains(got, "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(got, "listening") {
		t.Errorf("held by this test: %q, %v; want this pid, listening", got, err)
	}
	if got, err := portTaken(port, []int{os.Getpid()}); got != "" || err != nil {
		t.Errorf("held by the service's own process: %q, %v; want nothing", got, err)
	}
	l.Close()
	if got, err := portTaken(port, nil); got != "" || err != nil {
		t.Errorf("after close: %q, %v; want free", got, err)
	}
}

func TestParsePortRanges(t *testing.T) {
	has, err := parsePortRanges("8080, 50000-50010,")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[int]bool{8080: true, 50000: true, 50005: true, 50010: true, 50011: false, 8081: false} {
		if has(p) != want {
			t.Errorf("port %d: %v, want %v", p, has(p), want)
		}
	}
	if _, err := parsePortRanges("80-x"); err == nil {
		t.Error("80-x parsed")
	}
}
