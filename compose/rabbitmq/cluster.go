package rabbitmq

// The replicated stack's RabbitMQ: three nodes of Debian's rabbitmq-server
// on this host, joined into one cluster, so that the driver's quorum
// queues get three members (RabbitMQ's quorum_cluster_size, 3 by default)
// and survive the loss of any one node.
//
//   - Nodes: inboxbench-r1@localhost … inboxbench-r3@localhost, AMQP on
//     56672, 56674, 56676 and Erlang distribution on 56673, 56675, 56677,
//     all on 127.0.0.1; epmd (4369) is the host's one port mapper, shared
//     with the plain stack's node.
//   - Each node lives in <stack>/replicated/rabbitmq/nN (configuration,
//     mnesia, logs, and HOME, whose .erlang.cookie is the cluster's one
//     shared cookie, written before the first boot).
//   - The first `up` boots node 1, then nodes 2 and 3, and joins them to
//     node 1 (rabbitmqctl stop_app, join_cluster, start_app); later boots
//     find the cluster in their data and rejoin by themselves.
//   - cluster_partition_handling = autoheal (see rabbitClusterConf).
//   - net_ticktime 15 s (60 s by default): a paused node is declared down
//     within 11-19 s instead of about a minute, so a zombie leader's
//     clients and consumers are dropped at a time a failover scenario
//     measures. Busy-waiting schedulers are off: three VMs share two
//     cores with everything else.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/compose"
)

// Cluster is the replicated stack's three-node RabbitMQ cluster.
type Cluster struct{}

// rabbitClusterPorts are the nodes' AMQP ports; each node's distribution
// port is the next one.
var rabbitClusterPorts = []int{56672, 56674, 56676}

// rabbitClusterName is the cluster's name, set once its nodes joined: a
// node that reports it over AMQP (cluster_name) is a member.
const rabbitClusterName = "inboxbench-replicated"

// Name is "rabbitmq".
func (*Cluster) Name() string { return "rabbitmq" }

// Addr is the nodes' AMQP addresses.
func (c *Cluster) Addr(e *compose.Env) string {
	var addrs []string
	for _, n := range c.Nodes(e) {
		addrs = append(addrs, n.Addr)
	}
	return strings.Join(addrs, ",")
}

// Packages are the plain stack's.
func (*Cluster) Packages() []compose.Package { return (&Service{}).Packages() }

// Install is the plain stack's.
func (*Cluster) Install(ctx context.Context, e *compose.Env) error {
	return (&Service{}).Install(ctx, e)
}

// rabbitClusterNode is one node of the cluster: the RabbitMQ service that runs
// it (Service, with the node's own name, ports and directory), bound
// to the stack's Env.
type rabbitClusterNode struct {
	*Service
	e          *compose.Env
	name       string // the Erlang node name
	label      string // rabbitmq-1 …
	port, dist int
}

// nodes are the cluster's nodes in a fixed order; the first is the one
// the others join.
func (*Cluster) nodes(e *compose.Env) []rabbitClusterNode {
	out := make([]rabbitClusterNode, len(rabbitClusterPorts))
	for i, p := range rabbitClusterPorts {
		name, label := fmt.Sprintf("inboxbench-r%d@localhost", i+1), fmt.Sprintf("rabbitmq-%d", i+1)
		listener := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", p)
		r := &Service{inst: &rabbitInstance{node: name, port: p, dist: p + 1, tcpPort: true, what: "AMQP",
			conf:    func(*compose.Env) (string, error) { return listener, nil },
			plugins: plainRabbit.plugins, defs: plainRabbit.defs,
			dir: filepath.Join("rabbitmq", fmt.Sprintf("n%d", i+1)), label: label,
			erlArgs:   "-kernel net_ticktime 15 +sbwt none +sbwtdcpu none +sbwtdio none",
			extraConf: rabbitClusterConf}}
		out[i] = rabbitClusterNode{Service: r, e: e, name: name, label: label, port: p, dist: p + 1}
	}
	return out
}

func (n rabbitClusterNode) proc() compose.Proc             { return n.Procs(n.e)[0] }
func (n rabbitClusterNode) logs() []string                 { return n.Logs(n.e) }
func (n rabbitClusterNode) home() string                   { return n.path(n.e, "home") }
func (n rabbitClusterNode) stop(ctx context.Context) error { return n.Service.Stop(ctx, n.e) }
func (n rabbitClusterNode) ctl(ctx context.Context, args ...string) (string, error) {
	return n.Ctl(ctx, n.e, args...)
}

// Nodes implements compose.Cluster.
func (c *Cluster) Nodes(e *compose.Env) []compose.Node {
	var out []compose.Node
	for _, n := range c.nodes(e) {
		out = append(out, compose.Node{Name: n.label, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)), Proc: n.proc()})
	}
	return out
}

// Procs are the nodes' server scripts.
func (c *Cluster) Procs(e *compose.Env) []compose.Proc {
	var out []compose.Proc
	for _, n := range c.nodes(e) {
		out = append(out, n.proc())
	}
	return out
}

// Logs are the nodes' logs.
func (c *Cluster) Logs(e *compose.Env) []string {
	var out []string
	for _, n := range c.nodes(e) {
		out = append(out, n.logs()...)
	}
	return out
}

// DataDirs implements compose.Wiper: every node's directory.
func (*Cluster) DataDirs(e *compose.Env) []string { return []string{e.Path("rabbitmq")} }

// Ports implements compose.Porter: each node's AMQP and distribution ports, and
// the host's epmd.
func (c *Cluster) Ports(e *compose.Env) []compose.Port {
	var out []compose.Port
	for _, n := range c.nodes(e) {
		out = append(out, compose.Port{Port: n.port, What: n.label + " AMQP"}, compose.Port{Port: n.dist, What: n.label + " Erlang distribution"})
	}
	return append(out, compose.Port{Port: epmdPort, What: "epmd (shared by every Erlang node of the host)", Shared: true})
}

// Endpoints implements compose.Endpointer: the driver's URL list, one per node,
// and quorum queues of one member per node, which the driver declares
// and verifies (its durability report).
func (c *Cluster) Endpoints(e *compose.Env) (map[string]string, error) {
	return map[string]string{
		rabbitmqbroker.SettingURL:        strings.Join(c.urls(e), ","),
		rabbitmqbroker.SettingQuorumSize: strconv.Itoa(len(rabbitClusterPorts)),
	}, nil
}

// FailureTimeout implements compose.FailureDetector: the nodes' net_ticktime (a
// paused node is declared down within 11-19 s) and the driver's
// heartbeat (a client gives up a silent node after 15 s), whichever ends
// last; a quorum queue elects a new leader sooner (its own failure
// detector, aten).
func (*Cluster) FailureTimeout() time.Duration { return 20 * time.Second }

// WeakSetting implements compose.Weakener: classic queues, which live on the one
// node that declared them, published to without the mandatory flag.
// While that node is down, RabbitMQ routes a message for such a queue
// nowhere and, without mandatory, confirms it and drops it: every
// message published during the outage is confirmed and lost. (With the
// mandatory flag, the driver's default, it is returned and sent again,
// and nothing is lost: a classic queue's confirmed messages are on its
// node's disk and come back with it.)
func (*Cluster) WeakSetting() compose.Weakness {
	return compose.Weakness{Name: "classic queues without the mandatory flag (a message for a queue whose node is down is confirmed and dropped)",
		Settings: map[string]string{rabbitmqbroker.SettingQueueType: rabbitmqbroker.QueueClassic, rabbitmqbroker.SettingMandatory: "false"}}
}

func (c *Cluster) urls(e *compose.Env) []string {
	var out []string
	for _, n := range c.nodes(e) {
		out = append(out, n.url())
	}
	return out
}

// formedMarker is written once nodes 2 and 3 joined node 1.
func (*Cluster) formedMarker(e *compose.Env) string {
	return e.Path("rabbitmq", "cluster-formed")
}

// Start boots the nodes that are not running. The first time, it boots
// node 1, then the others, and joins them to node 1; afterwards every
// node's data says which cluster it belongs to, and the nodes boot
// together (each waits for the others' tables).
func (c *Cluster) Start(ctx context.Context, e *compose.Env) error {
	nodes := c.nodes(e)
	if err := c.writeCookie(e, nodes); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	if _, err := os.Stat(c.formedMarker(e)); err == nil {
		for _, n := range nodes {
			if err := n.startIfStopped(ctx); err != nil {
				return fmt.Errorf("%s: %w", n.label, err)
			}
		}
		return nil
	}
	first := nodes[0]
	if err := first.startIfStopped(ctx); err != nil {
		return fmt.Errorf("%s: %w", first.label, err)
	}
	if err := first.waitAMQP(ctx, 150*time.Second); err != nil {
		return err
	}
	for _, n := range nodes[1:] {
		if err := n.startIfStopped(ctx); err != nil {
			return fmt.Errorf("%s: %w", n.label, err)
		}
	}
	for _, n := range nodes[1:] {
		if err := n.join(ctx, first); err != nil {
			return err
		}
	}
	// Each node names itself until the cluster is given a name (a
	// global runtime parameter): Ready then knows the nodes share one.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := first.ctl(cctx, "set_cluster_name", rabbitClusterName); err != nil {
		return fmt.Errorf("rabbitmq: name the cluster: %w", err)
	}
	return os.WriteFile(c.formedMarker(e), []byte(time.Now().Format(time.RFC3339)+"\n"), 0o644)
}

// writeCookie gives every node's HOME the cluster's one Erlang cookie
// (generated on the first start, kept in <stack>/replicated/rabbitmq/cookie).
func (*Cluster) writeCookie(e *compose.Env, nodes []rabbitClusterNode) error {
	path := e.Path("rabbitmq", "cookie")
	cookie, err := os.ReadFile(path)
	if err != nil {
		cookie = []byte(rand.Text())
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, cookie, 0o400); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		f := filepath.Join(n.home(), ".erlang.cookie")
		if have, err := os.ReadFile(f); err == nil && string(have) == string(cookie) {
			continue
		}
		if err := os.MkdirAll(n.home(), 0o755); err != nil {
			return err
		}
		_ = os.Remove(f) // 0400: replaced, not rewritten
		if err := os.WriteFile(f, cookie, 0o400); err != nil {
			return err
		}
	}
	return nil
}

// Ready requires every node to answer AMQP (a channel on the vhost) and
// all of them to name the same cluster.
func (c *Cluster) Ready(ctx context.Context, e *compose.Env) (string, error) {
	var version string
	var errs []error
	for _, n := range c.nodes(e) {
		v, name, err := n.probe(ctx)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", n.label, err))
		case name != rabbitClusterName:
			errs = append(errs, fmt.Errorf("%s names its cluster %q, not %q: it has not joined the others yet", n.label, name, rabbitClusterName))
		default:
			version = v
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	if err := c.whole(ctx, e); err != nil {
		return "", err
	}
	return fmt.Sprintf("RabbitMQ %s, %d-node cluster", version, len(rabbitClusterPorts)), nil
}

// whole asks the first node that answers whether every node runs as a
// member and no partition is known: a partitioned cluster's nodes all
// answer AMQP and name the cluster, each side with its own metadata.
func (c *Cluster) whole(ctx context.Context, e *compose.Env) error {
	var errs []error
	for _, n := range c.nodes(e) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := n.ctl(cctx, "-q", "cluster_status", "--formatter", "json")
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var st struct {
			Running    []string       `json:"running_nodes"`
			Partitions map[string]any `json:"partitions"`
		}
		if err := json.Unmarshal([]byte(jsonPart(out)), &st); err != nil {
			errs = append(errs, fmt.Errorf("%s: cluster_status: %w", n.label, err))
			continue
		}
		if len(st.Partitions) > 0 {
			return fmt.Errorf("rabbitmq: the cluster is partitioned (%v, as %s sees it): autoheal restarts one side; if it stays, restart the nodes of the smaller side", st.Partitions, n.label)
		}
		if len(st.Running) < len(rabbitClusterPorts) {
			return fmt.Errorf("rabbitmq: %s counts %d running nodes of %d (%s): a node is not (yet) a running member", n.label, len(st.Running), len(rabbitClusterPorts), strings.Join(st.Running, ", "))
		}
		return nil
	}
	return errors.Join(errs...)
}

// Stop stops the nodes together: each waits for the others' quorum
// queues as it shuts down, so one after another would take longer.
func (c *Cluster) Stop(ctx context.Context, e *compose.Env) error {
	nodes := c.nodes(e)
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// NodeStatus implements compose.Cluster: each node's health (an AMQP channel),
// and its role from the quorum queues' leaders: "leader (k of n queues)"
// for a node leading some, "follower" for the others.
func (c *Cluster) NodeStatus(ctx context.Context, e *compose.Env) []compose.NodeStatus {
	nodes := c.nodes(e)
	out := make([]compose.NodeStatus, len(nodes))
	for i, n := range c.Nodes(e) {
		out[i].Node = n
		if _, _, err := nodes[i].probe(ctx); err != nil {
			out[i].Detail = err.Error()
		} else {
			out[i].Healthy = true
		}
	}
	qs, err := c.queues(ctx, e)
	if err != nil {
		for i := range out {
			if out[i].Healthy {
				out[i].Detail = "role unknown: " + err.Error()
			}
		}
		return out
	}
	led := map[string]int{}
	for _, q := range qs {
		led[q.Leader]++
	}
	for i, n := range nodes {
		switch {
		case led[n.name] > 0:
			out[i].Role = fmt.Sprintf("leader (%d of %d queues)", led[n.name], len(qs))
		case out[i].Healthy:
			out[i].Role = "follower"
		}
	}
	return out
}

// Leaders implements compose.Cluster: the nodes leading the queues of topic
// resource (the driver's shard queues "<topic>.N" and its "<topic>.dlq"),
// the node leading the most first.
func (c *Cluster) Leaders(ctx context.Context, e *compose.Env, resource string) ([]compose.Node, error) {
	qs, err := c.queues(ctx, e)
	if err != nil {
		return nil, err
	}
	led := map[string]int{}
	prefix := strings.TrimSuffix(resource, ".") + "."
	for _, q := range qs {
		if (q.Name == resource || strings.HasPrefix(q.Name, prefix)) && q.Leader != "" {
			led[q.Leader]++
		}
	}
	if len(led) == 0 {
		return nil, fmt.Errorf("rabbitmq: no queue named %s… with a leader among the %d queues of vhost %s", resource, len(qs), rabbitVhost)
	}
	var out []compose.Node
	count := map[string]int{} // by label
	nodes := c.Nodes(e)
	for i, n := range c.nodes(e) {
		if led[n.name] > 0 {
			out = append(out, nodes[i])
			count[n.label] = led[n.name]
		}
	}
	slices.SortStableFunc(out, func(a, b compose.Node) int { return count[b.Name] - count[a.Name] })
	return out, nil
}

// StartNode implements compose.Cluster: it boots the node if it is not running
// and waits until it answers AMQP as a member of the cluster.
func (c *Cluster) StartNode(ctx context.Context, e *compose.Env, name string) error {
	for _, n := range c.nodes(e) {
		if n.label != name {
			continue
		}
		if err := n.startIfStopped(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := n.waitAMQP(ctx, 150*time.Second); err != nil {
			return err
		}
		if _, cluster, err := n.probe(ctx); err != nil || cluster != rabbitClusterName {
			return fmt.Errorf("%s came back, but not as a member of the cluster (it names it %q; %v)", name, cluster, err)
		}
		// Counted as running by the cluster, without a partition.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := c.whole(ctx, e)
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s came back: %w", name, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return fmt.Errorf("rabbitmq: no node %q: the nodes are %s", name, strings.Join(c.nodeNames(e), ", "))
}

// StopNode implements compose.NodeStopper: rabbitmqctl stop (the node hands its
// quorum queues' leadership over and flushes their state), then whatever
// is left is killed.
func (c *Cluster) StopNode(ctx context.Context, e *compose.Env, name string) error {
	for _, n := range c.nodes(e) {
		if n.label == name {
			return n.stop(ctx)
		}
	}
	return fmt.Errorf("rabbitmq: no node %q: the nodes are %s", name, strings.Join(c.nodeNames(e), ", "))
}

func (c *Cluster) nodeNames(e *compose.Env) []string {
	var out []string
	for _, n := range c.nodes(e) {
		out = append(out, n.label)
	}
	return out
}

// rabbitQueue is one queue as rabbitmqctl list_queues shows it.
type rabbitQueue struct {
	Name, Type string
	Leader     string // the node leading a quorum queue, or running a classic one
}

// queues lists the vhost's queues with their leaders (a classic queue's
// leader is the node its process runs on), asking the first node that
// answers. The CLI's JSON prints pids without their node, so the
// tab-separated table is read.
func (c *Cluster) queues(ctx context.Context, e *compose.Env) ([]rabbitQueue, error) {
	var errs []error
	for _, n := range c.nodes(e) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := n.ctl(cctx, "list_queues", "-q", "--no-table-headers", "-p", rabbitVhost, "name", "type", "leader", "pid")
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var qs []rabbitQueue
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Split(line, "\t")
			if len(f) != 4 {
				continue
			}
			q := rabbitQueue{Name: f[0], Type: f[1], Leader: f[2]}
			if q.Leader == "" || q.Type != "quorum" {
				q.Leader = pidNode(f[3])
			}
			qs = append(qs, q)
		}
		return qs, nil
	}
	return nil, errors.Join(errs...)
}
