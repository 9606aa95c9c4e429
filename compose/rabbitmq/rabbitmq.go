// Package rabbitmq is the local stack's RabbitMQ: the plain stack's node
// (Service), the replicated stack's three-node cluster (Cluster) and the
// secure stack's TLS-only node (Secure), each a node of Debian's
// rabbitmq-server with its own name, ports and directory. It registers
// them as "rabbitmq" (package compose says how services work).
package rabbitmq

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/compose"
)

// Service runs a node from Debian's rabbitmq-server package as its own
// node: own node name, ports, data and log directories and HOME (which
// holds its Erlang cookie), so it neither needs nor disturbs the system
// service. The vhost, user and permissions come from a definitions file
// imported at boot, which makes provisioning declarative and idempotent.
type Service struct {
	// inst is the node this service runs; nil: the plain stack's
	// (plainRabbit). The secure variant's is in secure.go.
	inst *rabbitInstance
}

// rabbitInstance is what differs between the stacks' nodes.
type rabbitInstance struct {
	node       string
	port, dist int    // AMQP (or AMQPS) and Erlang distribution ports
	tcpPort    bool   // the AMQP port is the plain TCP listener (RABBITMQ_NODE_PORT)
	what       string // the AMQP port in status ("AMQP", "AMQPS")
	// conf is rabbitmq.conf's listener and authentication section;
	// plugins is enabled_plugins; defs the boot definitions.
	conf    func(e *compose.Env) (string, error)
	plugins string
	defs    func(e *compose.Env) (string, error)
	// dir is the node's directory under the stack's ("rabbitmq" when
	// empty), label its process's name in messages ("rabbitmq"), erlArgs
	// more arguments for its Erlang VM, extraConf more of rabbitmq.conf
	// (the replicated stack's nodes: cluster.go).
	dir, label, erlArgs, extraConf string
}

// path joins elem under the node's directory.
func (r *Service) path(e *compose.Env, elem ...string) string {
	dir := r.instance().dir
	if dir == "" {
		dir = "rabbitmq"
	}
	return e.Path(append([]string{dir}, elem...)...)
}

// procName is the node's process name in messages.
func (r *Service) procName() string {
	if l := r.instance().label; l != "" {
		return l
	}
	return "rabbitmq"
}

var plainRabbit = &rabbitInstance{node: rabbitNode, port: rabbitPort, dist: rabbitDistPort, tcpPort: true, what: "AMQP",
	conf: func(*compose.Env) (string, error) {
		return fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", rabbitPort), nil
	},
	plugins: "[].\n",
	defs: func(*compose.Env) (string, error) {
		return rabbitDefinitions(rabbitPassword, []string{"administrator"})
	}}

func (r *Service) instance() *rabbitInstance {
	if r.inst == nil {
		return plainRabbit
	}
	return r.inst
}

const (
	rabbitBin      = "/usr/lib/rabbitmq/bin"
	rabbitNode     = "inboxbench@localhost"
	rabbitPort     = 55672
	rabbitDistPort = 55673 // the default (AMQP port + 20000) would be out of range
	epmdPort       = 4369  // Erlang's port mapper, started by the node
	rabbitUser     = "inboxbench"
	rabbitPassword = "inboxbench"
	rabbitVhost    = "inboxbench"
)

func init() {
	compose.Register("rabbitmq", 2, compose.Variants{
		compose.VariantPlain:      func() compose.Service { return &Service{} },
		compose.VariantReplicated: func() compose.Service { return &Cluster{} },
		compose.VariantSecure:     func() compose.Service { return newSecure() },
	})
}

// Name is "rabbitmq".
func (*Service) Name() string { return "rabbitmq" }

// Addr is the host and port of the configured AMQP URL.
func (*Service) Addr(e *compose.Env) string {
	if a := rabbitmqbroker.Addr(e.Cfg.Get(rabbitmqbroker.SettingURL)); a != "" {
		return a
	}
	return "(" + rabbitmqbroker.SettingURL + " is not a valid AMQP URL)"
}

// Packages is rabbitmq-server.
func (*Service) Packages() []compose.Package {
	return []compose.Package{{Deb: "rabbitmq-server", Found: func() bool { return compose.IsExecutable(rabbitBin + "/rabbitmq-server") }}}
}

// Procs is the rabbitmq-server script, parent of the node's Erlang VM.
func (r *Service) Procs(e *compose.Env) []compose.Proc {
	return []compose.Proc{{Name: r.procName(), PIDFile: r.path(e, "server.pid"), LogFile: r.path(e, "server.log"),
		Match: []string{rabbitBin + "/rabbitmq-server"}, Home: r.path(e)}}
}

// Logs are the script's output and the node's log.
func (r *Service) Logs(e *compose.Env) []string {
	return []string{r.path(e, "server.log"), r.path(e, "log", "node.log")}
}

// DataDirs implements compose.Wiper: the node's whole directory.
func (r *Service) DataDirs(e *compose.Env) []string { return []string{r.path(e)} }

// Ports implements compose.Porter: AMQP, the node's Erlang distribution
// port (rabbitmqctl and clustering) and epmd, which the node starts.
func (r *Service) Ports(*compose.Env) []compose.Port {
	in := r.instance()
	return []compose.Port{{Port: in.port, What: in.what}, {Port: in.dist, What: "Erlang distribution"}, {Port: epmdPort, What: "epmd", Shared: true}}
}

// Install checks for the Debian package's server script.
func (*Service) Install(ctx context.Context, e *compose.Env) error {
	if !compose.IsExecutable(rabbitBin + "/rabbitmq-server") {
		return fmt.Errorf("%s/rabbitmq-server not found: install the Debian package rabbitmq-server", rabbitBin)
	}
	return nil
}

// env is the node's environment; rabbitmqctl needs the same to reach it.
func (r *Service) env(e *compose.Env) []string {
	d := r.path(e)
	in := r.instance()
	env := os.Environ()
	if in.tcpPort {
		env = append(env, "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1", fmt.Sprintf("RABBITMQ_NODE_PORT=%d", in.port))
	}
	return append(env,
		"HOME="+r.path(e, "home"),
		"RABBITMQ_CONF_ENV_FILE="+r.path(e, "rabbitmq-env.conf"),
		"RABBITMQ_NODENAME="+in.node,
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", in.dist),
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
		strings.TrimSpace("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+S 2:2 -kernel inet_dist_use_interface {127,0,0,1} "+in.erlArgs),
	)
}

// Start writes the node's configuration and boot definitions and starts
// it.
func (r *Service) Start(ctx context.Context, e *compose.Env) error {
	d := r.path(e)
	for _, sub := range []string{"home", "log", "mnesia"} {
		if err := os.MkdirAll(r.path(e, sub), 0o755); err != nil {
			return err
		}
	}
	in := r.instance()
	defs, err := in.defs(e)
	if err != nil {
		return err
	}
	listeners, err := in.conf(e)
	if err != nil {
		return err
	}
	files := map[string]string{
		"rabbitmq-env.conf": "# inboxbench: the node's settings come from the environment\n",
		"enabled_plugins":   in.plugins,
		"definitions.json":  defs,
		"rabbitmq.conf": fmt.Sprintf(`# written by bench stack up
%sload_definitions = %s/definitions.json
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
`, listeners, d, MemoryWatermark) + in.extraConf,
	}
	for name, content := range files {
		// 0600: the definitions hold the password's salted hash.
		if err := os.WriteFile(r.path(e, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	cmd := exec.Command(rabbitBin + "/rabbitmq-server")
	cmd.Env = r.env(e)
	cmd.Dir = d
	if err := compose.StartDetached(r.Procs(e)[0], cmd); err != nil {
		return fmt.Errorf("%s: %w", r.procName(), err)
	}
	return nil
}

// rabbitDefinitions renders the boot-time definitions: one vhost, one user
// with a salted SHA-256 hash of password (RabbitMQ's own scheme) and
// tags, full permissions on that vhost.
func rabbitDefinitions(password string, tags []string) (string, error) {
	salt := make([]byte, 4)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append([]byte{}, salt...), password...))
	hash := base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
	defs := map[string]any{
		"users": []map[string]any{{"name": rabbitUser, "password_hash": hash,
			"hashing_algorithm": "rabbit_password_hashing_sha256", "tags": append([]string{}, tags...)}},
		"vhosts": []map[string]any{{"name": rabbitVhost}},
		"permissions": []map[string]any{{"user": rabbitUser, "vhost": rabbitVhost,
			"configure": ".*", "write": ".*", "read": ".*"}},
	}
	b, err := json.MarshalIndent(defs, "", "  ")
	return string(b), err
}

// Ready opens an AMQP connection and a channel with the configured URL.
func (*Service) Ready(ctx context.Context, e *compose.Env) (string, error) {
	d := 3 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	conn, err := rabbitmqbroker.Dial(e.Cfg, "inboxbench-stack-status", d)
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

// MemoryWatermark is the node's vm_memory_high_watermark.absolute
// (rabbitmq.conf): what a test that raises a memory alarm restores.
const MemoryWatermark = "1GiB"

// Ctl runs rabbitmqctl against the stack's node, with the node's
// environment (its HOME holds the Erlang cookie), and returns the output.
func (r *Service) Ctl(ctx context.Context, e *compose.Env, args ...string) (string, error) {
	return r.tool(ctx, e, "rabbitmqctl", args...)
}

// tool runs one of the package's CLI tools (rabbitmqctl,
// rabbitmq-diagnostics, rabbitmq-queues) against the node.
func (r *Service) tool(ctx context.Context, e *compose.Env, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, rabbitBin+"/"+name, append([]string{"-n", r.instance().node}, args...)...)
	cmd.Env = r.env(e)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", compose.CommandLine(cmd), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Stop asks the node to stop cleanly (flushing quorum queue state), then
// makes sure its processes are gone and that epmd no longer lists the
// node: a node started right after would otherwise find its name taken.
func (r *Service) Stop(ctx context.Context, e *compose.Env) error {
	proc := r.Procs(e)[0]
	_, running := proc.PID()
	if running {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		cmd := exec.CommandContext(cctx, rabbitBin+"/rabbitmqctl", "-n", r.instance().node, "stop")
		cmd.Env = r.env(e)
		_ = compose.RunLogged(cctx, proc.LogFile, cmd)
		cancel()
	}
	if err := proc.Kill(ctx, 30*time.Second); err != nil || !running {
		return err
	}
	return waitUnregistered(ctx, epmdAddr, strings.Split(r.instance().node, "@")[0], 10*time.Second)
}

// Registered reports whether the host's epmd lists the node, as it does
// while the node runs (Stop waits until it no longer does).
func (r *Service) Registered(ctx context.Context) (bool, error) {
	names, err := epmdNames(ctx, epmdAddr)
	return slices.Contains(names, strings.Split(r.instance().node, "@")[0]), err
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
