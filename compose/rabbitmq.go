package compose

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/config"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ runs a node from Debian's rabbitmq-server package as its own
// node: own node name, ports, data and log directories and HOME (which
// holds its Erlang cookie), so it neither needs nor disturbs the system
// service. The vhost, user and permissions come from a definitions file
// imported at boot, which makes provisioning declarative and idempotent.
type RabbitMQ struct{}

const (
	rabbitBin      = "/usr/lib/rabbitmq/bin"
	rabbitNodeName = "inboxbench@localhost"
	rabbitPort     = 55672
	rabbitDistPort = 55673 // the default (AMQP port + 20000) would be out of range
	epmdPort       = 4369  // Erlang's port mapper, started by the node
	rabbitUser     = "inboxbench"
	rabbitPassword = "inboxbench"
	rabbitVhost    = "inboxbench"
)

func init() { register(2, &RabbitMQ{}) }

func (*RabbitMQ) Name() string { return "rabbitmq" }

func (*RabbitMQ) Addr(e *Env) string {
	raw := e.Cfg.Get(rabbitmqbroker.SettingURL)
	u, err := url.Parse(raw)
	if err != nil {
		return config.Redact(raw)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5672")
	}
	return u.Host
}

func (*RabbitMQ) Packages() []Package {
	return []Package{{Deb: "rabbitmq-server", Found: func() bool { return isExecutable(rabbitBin + "/rabbitmq-server") }}}
}

func (r *RabbitMQ) Procs(e *Env) []Proc { return []Proc{r.node(e).proc("rabbitmq")} }

func (r *RabbitMQ) Logs(e *Env) []string { return r.node(e).logs() }

func (r *RabbitMQ) DataDirs(e *Env) []string { return []string{e.Path("rabbitmq")} }

// Ports implements Porter: AMQP, the node's Erlang distribution port
// (rabbitmqctl and clustering) and epmd, which the node starts.
func (*RabbitMQ) Ports(*Env) []Port {
	return []Port{{Port: rabbitPort, What: "AMQP"}, {Port: rabbitDistPort, What: "Erlang distribution"}, {Port: epmdPort, What: "epmd"}}
}

func (*RabbitMQ) Install(ctx context.Context, e *Env) error { return rabbitInstalled() }

func rabbitInstalled() error {
	if !isExecutable(rabbitBin + "/rabbitmq-server") {
		return fmt.Errorf("%s/rabbitmq-server not found: install the Debian package rabbitmq-server", rabbitBin)
	}
	return nil
}

// node is the plain stack's one node.
func (*RabbitMQ) node(e *Env) rabbitNode {
	return rabbitNode{name: rabbitNodeName, port: rabbitPort, dist: rabbitDistPort, dir: e.Path("rabbitmq"), label: "rabbitmq"}
}

// env is the node's environment; rabbitmqctl needs the same to reach it.
func (r *RabbitMQ) env(e *Env) []string { return r.node(e).env() }

func (r *RabbitMQ) Start(ctx context.Context, e *Env) error {
	if err := r.node(e).start("rabbitmq", ""); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	return nil
}

// rabbitNode is one RabbitMQ node the stack runs from Debian's package: its
// Erlang node name, AMQP and distribution ports, and the directory that
// holds its configuration, data, logs and HOME (whose .erlang.cookie
// rabbitmqctl authenticates with).
type rabbitNode struct {
	name       string // "inboxbench@localhost"
	port, dist int
	dir        string
	label      string // its process's name in messages: "rabbitmq", "rabbitmq-2"
	erlArgs    string // more arguments for the Erlang VM
}

func (n rabbitNode) proc(label string) Proc {
	return Proc{Name: label, PIDFile: filepath.Join(n.dir, "server.pid"), LogFile: filepath.Join(n.dir, "server.log"),
		Match: []string{rabbitBin + "/rabbitmq-server"}, Home: n.dir}
}

func (n rabbitNode) logs() []string {
	return []string{filepath.Join(n.dir, "server.log"), filepath.Join(n.dir, "log", "node.log")}
}

func (n rabbitNode) home() string { return filepath.Join(n.dir, "home") }

// env is the node's environment; rabbitmqctl needs the same to reach it.
func (n rabbitNode) env() []string {
	d := n.dir
	return append(os.Environ(),
		"HOME="+n.home(),
		"RABBITMQ_CONF_ENV_FILE="+d+"/rabbitmq-env.conf",
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", n.port),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", n.dist),
		"RABBITMQ_CONFIG_FILE="+d+"/rabbitmq.conf",
		"RABBITMQ_ENABLED_PLUGINS_FILE="+d+"/enabled_plugins",
		"RABBITMQ_MNESIA_BASE="+d+"/mnesia",
		"RABBITMQ_LOG_BASE="+d+"/log",
		"RABBITMQ_LOGS="+d+"/log/node.log",
		"RABBITMQ_PID_FILE="+d+"/node.pid",
		"ERL_EPMD_ADDRESS=127.0.0.1",
		// Two schedulers match the 2-core target machine. The distribution
		// port (rabbitmqctl talks to the node through it) listens on every
		// interface unless the kernel is told which one: set at boot, before
		// the node starts distribution.
		strings.TrimSpace("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+S 2:2 -kernel inet_dist_use_interface {127,0,0,1} "+n.erlArgs),
	)
}

// start writes the node's files and starts it detached; extraConf is
// appended to its rabbitmq.conf.
func (n rabbitNode) start(label, extraConf string) error {
	for _, sub := range []string{"home", "log", "mnesia"} {
		if err := os.MkdirAll(filepath.Join(n.dir, sub), 0o755); err != nil {
			return err
		}
	}
	defs, err := rabbitDefinitions()
	if err != nil {
		return err
	}
	files := map[string]string{
		"rabbitmq-env.conf": "# inboxbench: the node's settings come from the environment\n",
		"enabled_plugins":   "[].\n",
		"definitions.json":  defs,
		"rabbitmq.conf": fmt.Sprintf(`# written by bench stack up
listeners.tcp.1 = 127.0.0.1:%d
load_definitions = %s/definitions.json
loopback_users = none
# Small, shared machine: keep memory bounded and let the disk alarm trip
# late. Quorum queues keep their write-ahead log in memory until it rolls
# over (512 MB by default): a smaller WAL rolls sooner, so a backlog of
# 200k messages does not trip the memory alarm, which would block the
# publishers and measure the alarm instead of the broker.
vm_memory_high_watermark.absolute = %s
raft.wal_max_size_bytes = 67108864
disk_free_limit.absolute = 100MB
log.console = false
log.file.level = info
`, n.port, n.dir, RabbitMQMemoryWatermark) + extraConf,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	cmd := exec.Command(rabbitBin + "/rabbitmq-server")
	cmd.Env = n.env()
	cmd.Dir = n.dir
	return StartDetached(n.proc(label), cmd)
}

// rabbitDefinitions renders the boot-time definitions: one vhost, one user
// with a salted SHA-256 password hash (RabbitMQ's own scheme), full
// permissions on that vhost.
func rabbitDefinitions() (string, error) {
	salt := make([]byte, 4)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append([]byte{}, salt...), rabbitPassword...))
	hash := base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
	defs := map[string]any{
		"users": []map[string]any{{"name": rabbitUser, "password_hash": hash,
			"hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []string{"administrator"}}},
		"vhosts": []map[string]any{{"name": rabbitVhost}},
		"permissions": []map[string]any{{"user": rabbitUser, "vhost": rabbitVhost,
			"configure": ".*", "write": ".*", "read": ".*"}},
	}
	b, err := json.MarshalIndent(defs, "", "  ")
	return string(b), err
}

func (*RabbitMQ) Ready(ctx context.Context, e *Env) (string, error) {
	d := 3 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	conn, err := amqp.DialConfig(e.Cfg.Get(rabbitmqbroker.SettingURL), amqp.Config{Dial: amqp.DefaultDial(d)})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// A channel proves the vhost and permissions, not just the listener.
	ch, err := conn.Channel()
	if err != nil {
		return "", err
	}
	ch.Close()
	v, _ := conn.Properties["version"].(string)
	return "RabbitMQ " + v, nil
}

// RabbitMQMemoryWatermark is the node's vm_memory_high_watermark.absolute
// (rabbitmq.conf): what a test that raises a memory alarm restores.
const RabbitMQMemoryWatermark = "1GiB"

// Ctl runs rabbitmqctl against the stack's node, with the node's
// environment (its HOME holds the Erlang cookie), and returns the output.
func (r *RabbitMQ) Ctl(ctx context.Context, e *Env, args ...string) (string, error) {
	return r.node(e).ctl(ctx, args...)
}

// ctl runs rabbitmqctl against the node with its environment.
func (n rabbitNode) ctl(ctx context.Context, args ...string) (string, error) {
	return n.tool(ctx, "rabbitmqctl", args...)
}

// tool runs one of the package's CLI tools (rabbitmqctl, rabbitmq-queues,
// rabbitmq-diagnostics) against the node with its environment.
func (n rabbitNode) tool(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, rabbitBin+"/"+name, append([]string{"-n", n.name}, args...)...)
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", CommandLine(cmd), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Stop asks the node to stop cleanly (flushing quorum queue state), then
// makes sure its processes are gone and that epmd no longer lists the
// node: a node started right after would otherwise find its name taken.
func (r *RabbitMQ) Stop(ctx context.Context, e *Env) error { return r.node(e).stop(ctx, "rabbitmq") }

// stop asks the node to stop cleanly, kills what is left, and waits until
// epmd no longer lists it.
func (n rabbitNode) stop(ctx context.Context, label string) error {
	proc := n.proc(label)
	_, running := proc.PID()
	if running {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		cmd := exec.CommandContext(cctx, rabbitBin+"/rabbitmqctl", "-n", n.name, "stop")
		cmd.Env = n.env()
		_ = RunLogged(cctx, proc.LogFile, cmd)
		cancel()
	}
	if err := proc.Kill(ctx, 30*time.Second); err != nil || !running {
		return err
	}
	return waitUnregistered(ctx, epmdAddr, strings.Split(n.name, "@")[0], 10*time.Second)
}

// epmdAddr is the epmd the node registers with (ERL_EPMD_ADDRESS).
var epmdAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(epmdPort))

// waitUnregistered waits up to d until the epmd at addr no longer lists
// node (the name before the @). The VM's connection to epmd is what
// registers it, so this follows the VM's exit within moments.
func waitUnregistered(ctx context.Context, addr, node string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		names, err := epmdNames(ctx, addr)
		if err != nil || !slices.Contains(names, node) {
			return nil // no epmd: nothing is registered
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("the node %s is still registered with epmd at %s %s after its processes exited", node, addr, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// epmdNames asks the epmd at addr for its registered node names
// (NAMES_REQ: epmd answers with its port, then one "name N at port P"
// line per node, and closes).
func epmdNames(ctx context.Context, addr string) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(cctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := cctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte{0, 1, 110}); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("epmd at %s: short answer %q", addr, b)
	}
	var names []string
	for _, line := range strings.Split(string(b[4:]), "\n") {
		if rest, ok := strings.CutPrefix(line, "name "); ok {
			if name, _, ok := strings.Cut(rest, " at port "); ok {
				names = append(names, name)
			}
		}
	}
	return names, nil
}
