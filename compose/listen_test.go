package compose

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:D8A0":                         "127.0.0.1:55456",
		"00000000:07E8":                         "0.0.0.0:2024",
		"00000000000000000000000001000000:1111": "[::1]:4369",
		"0000000000000000FFFF00000100007F:E6D4": "[::ffff:127.0.0.1]:59092",
		"00000000000000000000000000000000:C5D0": "[::]:50640",
	} {
		got, err := parseProcAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("parseProcAddr(%s) = %v, %v; want %s", in, got, err, want)
		}
	}
}

// fakeService is a service of name (default "fake") whose only process
// is proc (this test binary, say), listening on ports.
type fakeService struct {
	name  string
	proc  Proc
	ports []Port
}

func (f *fakeService) Name() string {
	if f.name == "" {
		return "fake"
	}
	return f.name
}
func (f *fakeService) Procs(*Env) []Proc                           { return []Proc{f.proc} }
func (f *fakeService) Ports(*Env) []Port                           { return f.ports }
func (f *fakeService) Addr(*Env) string                            { return "" }
func (f *fakeService) Logs(*Env) []string                          { return nil }
func (f *fakeService) Install(context.Context, *Env) error         { return nil }
func (f *fakeService) Start(context.Context, *Env) error           { return nil }
func (f *fakeService) Ready(context.Context, *Env) (string, error) { return "", errors.New("fake") }
func (f *fakeService) DataDirs(*Env) []string                      { return nil }

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// TestListenersFindsExposedSockets: a socket bound to every interface is
// found through the service's process (its pid file) or its known port,
// reported as exposed unless its port carries a documented reason, and a
// loopback socket is not exposed.
func TestListenersFindsExposedSockets(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	dir := t.TempDir()
	svc := &fakeService{proc: Proc{Name: "fake", PIDFile: filepath.Join(dir, "fake.pid"), Match: []string{filepath.Base(exe)}, Home: cwd}}
	writePID(t, svc.proc, strconv.Itoa(os.Getpid()))
	byProcess := listen(t, ":0")         // found through the pid file only
	loop := listen(t, "127.0.0.1:0")     // loopback: fine
	documented := listen(t, "0.0.0.0:0") // exposed, with a reason
	svc.ports = []Port{{Port: port(documented), AllInterfaces: "a reason"}, {Port: port(loop)}}

	row := StatusRow{}
	row.Listening, row.ListenErr = Listeners(&Env{Dir: dir}, svc)
	if row.ListenErr != nil {
		t.Fatal(row.ListenErr)
	}
	found := map[int]Listening{}
	for _, l := range row.Listening {
		found[int(l.Addr.Port())] = l
	}
	for _, l := range []net.Listener{byProcess, loop, documented} {
		if _, ok := found[port(l)]; !ok {
			t.Errorf("listener %s not found in %v", l.Addr(), row.Listening)
		}
	}
	exposed := row.Exposed()
	if len(exposed) != 1 || int(exposed[0].Addr.Port()) != port(byProcess) || !strings.HasPrefix(exposed[0].String(), "*:") {
		t.Errorf("exposed = %v, want only *:%d", exposed, port(byProcess))
	}
	if l := found[port(documented)]; l.Allowed != "a reason" || l.Loopback() {
		t.Errorf("documented exception %+v", l)
	}
	if l := found[port(loop)]; !l.Loopback() || l.Addr.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("loopback listener %+v", l)
	}
}
