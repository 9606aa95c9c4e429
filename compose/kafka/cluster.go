package kafka

// The replicated stack's Kafka: three KRaft nodes on loopback, each broker
// and controller in one JVM, with a static quorum of the three
// (controller.quorum.voters, so each storage is formatted without
// --standalone), default replication factor 3 and min.insync.replicas 2,
// internal topics replicated alike (templates/kafka-replicated-server.properties).
//
//   - The classpath is the plain stack's artifacts (Kafka 4.4.0, log4j2),
//     fetched once into <stack>/replicated/kafka/lib.
//   - Heap per node: kafkaNodeHeap (three nodes and the replicated
//     PostgreSQL stay under 6 GiB resident; docs/measurements.md, "Stack memory").
//   - Layout under <stack>/replicated:
//     kafka/lib                the classpath
//     kafka/node-N/config      server.properties, log4j2.xml
//     kafka/node-N/data        log.dirs
//     kafka/node-N/logs        server.log, controller.log
//     logs/kafka-N.log         the JVM's stdout/stderr
//     run/kafka-N.pid

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/compose"
)

// kafkaClusterNode is one node's id and loopback listeners (docs/stack.md).
type kafkaClusterNode struct {
	id                 int
	broker, controller string
}

var kafkaClusterNodes = []kafkaClusterNode{
	{1, "127.0.0.1:59192", "127.0.0.1:59193"},
	{2, "127.0.0.1:59292", "127.0.0.1:59293"},
	{3, "127.0.0.1:59392", "127.0.0.1:59393"},
}

// kafkaNodeHeap is each node's JVM memory.
var kafkaNodeHeap = []string{"-Xms256m", "-Xmx384m", "-XX:MaxDirectMemorySize=128m", "-XX:MaxMetaspaceSize=128m"}

// kafkaSessionTimeout is broker.session.timeout.ms: a broker silent for
// this long is fenced and its partitions' leadership moves.
const kafkaSessionTimeout = 9 * time.Second

// kafkaReplicatedID is base64url("inboxbench-kfk-3"), the replicated
// cluster's fixed id.
const kafkaReplicatedID = "aW5ib3hiZW5jaC1rZmstMw"

// Cluster is the replicated stack's three-node Kafka.
type Cluster struct{}

// Name is "kafka".
func (*Cluster) Name() string { return "kafka" }

// Packages are Java and Maven.
func (*Cluster) Packages() []compose.Package { return compose.JavaPackages() }

// Addr is the nodes' broker listeners.
func (*Cluster) Addr(*compose.Env) string { return strings.Join(kafkaClusterSeeds(), ",") }

func kafkaClusterSeeds() []string {
	var out []string
	for _, n := range kafkaClusterNodes {
		out = append(out, n.broker)
	}
	return out
}

// Endpoints implements compose.Endpointer: every command's Kafka seeds are the
// three nodes.
func (k *Cluster) Endpoints(e *compose.Env) (map[string]string, error) {
	return map[string]string{kafkabroker.SettingBrokers: k.Addr(e)}, nil
}

// DataDirs implements compose.Wiper: each node's data and logs.
func (*Cluster) DataDirs(e *compose.Env) []string {
	var out []string
	for _, n := range kafkaClusterNodes {
		out = append(out, e.Path("kafka", nodeDir(n.id), "data"), e.Path("kafka", nodeDir(n.id), "logs"))
	}
	return out
}

func nodeDir(id int) string { return "node-" + strconv.Itoa(id) }

func kafkaNodeName(id int) string { return "kafka-" + strconv.Itoa(id) }

func (*Cluster) proc(e *compose.Env, n kafkaClusterNode) compose.Proc {
	name := kafkaNodeName(n.id)
	return compose.Proc{Name: name, PIDFile: e.Path("run", name+".pid"), LogFile: e.Path("logs", name+".log"),
		Match: []string{"kafka.Kafka"}, Home: e.Path("kafka", nodeDir(n.id))}
}

// Procs are the nodes' JVMs.
func (k *Cluster) Procs(e *compose.Env) []compose.Proc {
	var out []compose.Proc
	for _, n := range kafkaClusterNodes {
		out = append(out, k.proc(e, n))
	}
	return out
}

// Ports implements compose.Porter: each node's broker and controller listeners.
func (*Cluster) Ports(*compose.Env) []compose.Port {
	var out []compose.Port
	for _, n := range kafkaClusterNodes {
		for _, a := range []string{n.broker, n.controller} {
			_, p, _ := net.SplitHostPort(a)
			port, _ := strconv.Atoi(p)
			out = append(out, compose.Port{Port: port, What: "Kafka " + kafkaNodeName(n.id)})
		}
	}
	return out
}

// Logs are each node's JVM output and server log, and the storage
// format's.
func (k *Cluster) Logs(e *compose.Env) []string {
	var out []string
	for _, n := range kafkaClusterNodes {
		out = append(out, k.proc(e, n).LogFile, e.Path("kafka", nodeDir(n.id), "logs", "server.log"))
	}
	return append(out, e.Path("logs", "kafka-format.log"))
}

// DurabilitySettings implements compose.DurabilityAware, as the plain
// stack's.
func (*Cluster) DurabilitySettings(profile string) string {
	return (&Service{}).DurabilitySettings(profile)
}

// Install fetches Kafka's classpath, shared by the nodes.
func (*Cluster) Install(ctx context.Context, e *compose.Env) error {
	return javaRuntime.Install(ctx, e)
}

// jvm is the JVM of n.
func (*Cluster) jvm(e *compose.Env, n kafkaClusterNode) jvmNode {
	return jvmNode{dir: e.Path("kafka", nodeDir(n.id)), heap: kafkaNodeHeap, clusterID: kafkaReplicatedID}
}

// writeConfig renders one node's server.properties and log4j2.xml.
func (k *Cluster) writeConfig(e *compose.Env, n kafkaClusterNode) error {
	var voters []string
	for _, v := range kafkaClusterNodes {
		voters = append(voters, fmt.Sprintf("%d@%s", v.id, v.controller))
	}
	node := k.jvm(e, n)
	data := map[string]string{
		"NodeID": strconv.Itoa(n.id), "Voters": strings.Join(voters, ","),
		"BrokerAddr": n.broker, "ControllerAddr": n.controller,
		"DataDir":            filepath.Join(node.dir, "data"),
		"SessionTimeoutMs":   strconv.Itoa(int(kafkaSessionTimeout / time.Millisecond)),
		"DurabilitySettings": "",
	}
	if k.DurabilitySettings(compose.StartProfile(e, k)) != "" {
		data["DurabilitySettings"] = "\n# Durability profile fsync: fsync the log after every append, before the\n# produce response.\nlog.flush.interval.messages=1"
	}
	return node.writeConfig("kafka-replicated-server.properties", data)
}

// Start starts every node that is not running, side by side (a node that
// died is started alone; the others keep running).
func (k *Cluster) Start(ctx context.Context, e *compose.Env) error {
	var wg sync.WaitGroup
	errs := make([]error, len(kafkaClusterNodes))
	for i, n := range kafkaClusterNodes {
		k.Nodes(e)[i].ContinueIfStopped()
		if k.proc(e, n).Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = k.startNode(ctx, e, n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startNode writes a node's configuration, formats its storage once and
// starts its JVM.
func (k *Cluster) startNode(ctx context.Context, e *compose.Env, n kafkaClusterNode) error {
	java, err := javaRuntime.Launcher(ctx, e, func(e *compose.Env) error { return k.writeConfig(e, n) })
	if err != nil {
		return err
	}
	if err := k.jvm(e, n).format(ctx, java, e, nil); err != nil {
		return fmt.Errorf("%s: format storage: %w", kafkaNodeName(n.id), err)
	}
	return java.Start(k.proc(e, n), k.jvm(e, n).server())
}

// client connects to the cluster's seeds.
func (k *Cluster) client(e *compose.Env) (*kgo.Client, *kadm.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaClusterSeeds()...), kgo.DialTimeout(3*time.Second),
		kgo.RetryTimeout(5*time.Second), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, kadm.NewClient(cl), nil
}

// Ready requires every node registered with the cluster (the metadata
// lists three brokers), so that a topic can be created with its
// replication factor of 3, and every node's own listener answering: after
// an unclean stop the metadata still lists a node's old registration
// while the new process waits to replace it (DUPLICATE_BROKER_REGISTRATION,
// seen for 10 s), its listener not yet open. Then it turns share groups on
// (shareGroups), every node running the release.
func (k *Cluster) Ready(ctx context.Context, e *compose.Env) (string, error) {
	cl, adm, err := k.client(e)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka metadata from %s: %w", k.Addr(e), err)
	}
	if len(md.Brokers) < len(kafkaClusterNodes) {
		return "", fmt.Errorf("kafka at %s: %d of %d nodes registered (%v)", k.Addr(e), len(md.Brokers), len(kafkaClusterNodes), md.Brokers.NodeIDs())
	}
	for _, n := range kafkaClusterNodes {
		if err := k.answers(ctx, n); err != nil {
			return "", err
		}
	}
	if err := shareGroups(ctx, e, adm); err != nil {
		return "", err
	}
	return "Kafka " + javaRuntime.InstalledVersion(e) + ", 3 KRaft nodes", nil
}

// Stop signals every node at once, then waits for each: stopped one after
// another, the last nodes would wait for a quorum the first already left.
func (k *Cluster) Stop(ctx context.Context, e *compose.Env) error {
	var wg sync.WaitGroup
	errs := make([]error, len(kafkaClusterNodes))
	for i, n := range kafkaClusterNodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = k.proc(e, n).Kill(ctx, 30*time.Second)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Nodes implements compose.Cluster.
func (k *Cluster) Nodes(e *compose.Env) []compose.Node {
	var out []compose.Node
	for _, n := range kafkaClusterNodes {
		out = append(out, compose.Node{Name: kafkaNodeName(n.id), Addr: n.broker, Proc: k.proc(e, n)})
	}
	return out
}

func (k *Cluster) node(e *compose.Env, name string) (kafkaClusterNode, compose.Node, error) {
	for i, n := range k.Nodes(e) {
		if n.Name == name {
			return kafkaClusterNodes[i], n, nil
		}
	}
	return kafkaClusterNode{}, compose.Node{}, fmt.Errorf("kafka has no node %q: its nodes are %s", name, strings.Join(nodeNames(k.Nodes(e)), ", "))
}

// NodeStatus implements compose.Cluster: a node is healthy when its process runs
// and the cluster lists it as a broker; its role is its place in the
// metadata quorum (leader or follower), and the detail how many
// partitions it leads.
func (k *Cluster) NodeStatus(ctx context.Context, e *compose.Env) []compose.NodeStatus {
	nodes := k.Nodes(e)
	out := make([]compose.NodeStatus, len(nodes))
	for i, n := range nodes {
		out[i] = compose.NodeStatus{Node: n}
	}
	cl, adm, err := k.client(e)
	if err != nil {
		for i := range out {
			out[i].Detail = err.Error()
		}
		return out
	}
	defer cl.Close()
	md, mdErr := adm.Metadata(ctx)
	quorumLeader := kafkaQuorumLeader(ctx, cl)
	led := map[int32]int{}
	total := 0
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			led[p.Leader]++
			total++
		}
	}
	for i, n := range kafkaClusterNodes {
		s := &out[i]
		pid, alive := s.Proc.PID()
		registered := slices.Contains(md.Brokers.NodeIDs(), int32(n.id))
		switch {
		case !alive:
			s.Detail = "not running"
		case mdErr != nil:
			s.Detail = mdErr.Error()
		case !registered:
			s.Detail = fmt.Sprintf("pid %d, not registered with the cluster (starting, or fenced)", pid)
		default:
			s.Healthy = true
			s.Detail = fmt.Sprintf("pid %d, leads %d of %d partitions", pid, led[int32(n.id)], total)
		}
		switch {
		case !alive:
		case quorumLeader == int32(n.id):
			s.Role = "leader"
		case quorumLeader >= 0:
			s.Role = "follower"
		}
	}
	return out
}

// kafkaQuorumLeader asks the metadata quorum for its leader (DescribeQuorum,
// which a broker forwards to the controllers); -1 when unknown.
func kafkaQuorumLeader(ctx context.Context, cl *kgo.Client) int32 {
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = "__cluster_metadata"
	p := kmsg.NewDescribeQuorumRequestTopicPartition()
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 || len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0 {
		return -1
	}
	return resp.Topics[0].Partitions[0].LeaderID
}

// Leaders implements compose.Cluster: the nodes leading partitions of the topic
// resource (or of every topic whose name starts with it; of all topics
// for ""), the one leading the most first. Each node learns of a new
// topic from the metadata log on its own schedule, so the node asked may
// not list a topic created a moment ago through another: Leaders asks
// again for up to ten seconds before it says no node leads.
func (k *Cluster) Leaders(ctx context.Context, e *compose.Env, resource string) ([]compose.Node, error) {
	cl, adm, err := k.client(e)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := k.leaders(ctx, e, adm, resource)
		if err == nil || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// leaders is one metadata read of Leaders.
func (k *Cluster) leaders(ctx context.Context, e *compose.Env, adm *kadm.Client, resource string) ([]compose.Node, error) {
	tds, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata: %w", err)
	}
	led := map[int32]int{}
	for name, td := range tds {
		if resource != "" && name != resource && !strings.HasPrefix(name, resource) {
			continue
		}
		for _, p := range td.Partitions {
			if p.Leader >= 0 {
				led[p.Leader]++
			}
		}
	}
	var out []compose.Node
	for i, n := range k.Nodes(e) {
		if led[int32(kafkaClusterNodes[i].id)] > 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kafka: no node leads a partition of %q", resource)
	}
	slices.SortStableFunc(out, func(a, b compose.Node) int { return led[kafkaNodeID(b)] - led[kafkaNodeID(a)] })
	return out, nil
}

func kafkaNodeID(n compose.Node) int32 {
	id, _ := strconv.Atoi(strings.TrimPrefix(n.Name, "kafka-"))
	return int32(id)
}

// StartNode implements compose.Cluster: it starts the node when its process is
// not running, then waits until the cluster lists it and it is back in
// the in-sync set of every partition it holds a replica of (caught up):
// only then can a rolling restart take the next node without leaving a
// partition below min.insync.replicas.
func (k *Cluster) StartNode(ctx context.Context, e *compose.Env, name string) error {
	n, node, err := k.node(e, name)
	if err != nil {
		return err
	}
	node.ContinueIfStopped()
	if !node.Proc.Running() {
		if err := k.startNode(ctx, e, n); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		if !node.Proc.Running() {
			return fmt.Errorf("%s exited while starting: read %s", name, node.Proc.LogFile)
		}
		if last = k.answers(ctx, n); last == nil {
			if last = k.caughtUp(ctx, int32(n.id)); last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", name, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s was not counted back in within 3m: %v", name, last)
}

// answers checks that the node's own listener serves requests: the node
// the cluster may still list is the one killed until it is fenced, so
// only an answer from its address shows the new process is up.
func (k *Cluster) answers(ctx context.Context, n kafkaClusterNode) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.broker), kgo.DialTimeout(2*time.Second), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return errors.New("no seed broker")
	}
	if _, err := seeds[0].Request(rctx, kmsg.NewPtrApiVersionsRequest()); err != nil {
		return fmt.Errorf("%s does not answer at %s yet: %w", kafkaNodeName(n.id), n.broker, err)
	}
	return nil
}

// caughtUp checks that broker id is registered and in the in-sync set of
// every partition it holds a replica of.
func (k *Cluster) caughtUp(ctx context.Context, id int32) error {
	cl, adm, err := k.client(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	md, err := adm.Metadata(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(md.Brokers.NodeIDs(), id) {
		return fmt.Errorf("broker %d not registered yet", id)
	}
	behind := 0
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			if slices.Contains(p.Replicas, id) && !slices.Contains(p.ISR, id) {
				behind++
			}
		}
	}
	if behind > 0 {
		return fmt.Errorf("broker %d not yet in the in-sync set of %d partitions", id, behind)
	}
	return nil
}

// StopNode implements compose.NodeStopper: SIGTERM, Kafka's controlled shutdown
// (leadership moves away first), SIGKILL after a minute.
func (k *Cluster) StopNode(ctx context.Context, e *compose.Env, name string) error {
	_, node, err := k.node(e, name)
	if err != nil {
		return err
	}
	return node.Proc.Kill(ctx, time.Minute)
}

// FailureTimeout implements compose.FailureDetector: the broker session timeout.
func (*Cluster) FailureTimeout() time.Duration { return kafkaSessionTimeout }

// WeakSetting implements compose.Weakener: acks=1, the leader alone confirms (the
// idempotent producer is then off).
func (*Cluster) WeakSetting() compose.Weakness {
	return compose.Weakness{Name: "acks=1 (the leader alone confirms a record)",
		Settings: map[string]string{kafkabroker.SettingAcks: kafkabroker.AcksLeader}}
}

func nodeNames(ns []compose.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}
