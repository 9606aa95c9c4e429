package rocketmq

// The replicated stack's RocketMQ 5: one broker group (broker-a) of three
// brokers in controller mode, whose master the controller switches when it
// is lost, and a name server with that controller embedded.
//
//   - Name server 59976; the embedded controller's DLedger peer (and the
//     address brokers send controller requests to) 59977. One controller:
//     a failover fault hits brokers, and losing the controller stops only
//     the switching, not the traffic.
//   - Brokers rocketmq-1 … rocketmq-3: listenPort 51011, 51111, 51211,
//     fastListenPort −2, HA port +1 (every interface, as in the plain
//     stack; docs/stack.md). Each has its store and its logback logs
//     under <stack>/replicated/rocketmq/bN (store, logs/rocketmqlogs),
//     its configuration in <stack>/replicated/rocketmq/conf.
//   - allAckInSyncStateSet=true and minInSyncReplicas=2: a send is
//     answered once every replica of the SyncStateSet has it, and the set
//     never shrinks below two, so every confirmed message is on two
//     brokers; the controller elects only from the set
//     (enableElectUncleanMaster=false). The weak setting
//     (WeakSetting) turns allAckInSyncStateSet off at run time.
//   - Memory: name server and controller -Xmx256m; each broker -Xmx384m
//     and 64 MiB commit-log files.

import (
	"context"
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

	rocketmqbroker "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

// Cluster is the replicated stack's RocketMQ: one broker group
// of three brokers in controller mode.
type Cluster struct{}

const (
	rocketmqClusterNamesrv    = "127.0.0.1:59976"
	rocketmqClusterController = "127.0.0.1:59977"
	// Group is the replicated stack's broker group: its three
	// brokers share the name.
	Group = "broker-a"
)

// rocketmqRemoting reaches the replicated stack's name server, controller
// and brokers: plaintext and unsigned, whatever the configuration says of
// other RocketMQs (the stack runs without TLS and ACLs).
var rocketmqRemoting = sync.OnceValue(func() *rocketmqbroker.Remoting {
	rm, err := rocketmqbroker.NewRemoting(config.Default())
	if err != nil {
		panic(fmt.Sprintf("compose: the defaults make no RocketMQ remoting: %v", err)) // a programming error
	}
	return rm
})

// rocketmqClusterPorts are the brokers' listen ports.
var rocketmqClusterPorts = []int{51011, 51111, 51211}

var rocketmqClusterBrokerHeap = []string{"-Xms128m", "-Xmx384m", "-XX:MaxDirectMemorySize=128m"}

// Name is "rocketmq".
func (*Cluster) Name() string { return "rocketmq" }

// Addr is the name server.
func (*Cluster) Addr(*compose.Env) string { return rocketmqClusterNamesrv }

// Packages are Java and Maven.
func (*Cluster) Packages() []compose.Package { return compose.JavaPackages() }

// DataDirs implements compose.Wiper: the whole rocketmq directory but
// its classpath (the brokers' stores and logs, the name server's state).
func (*Cluster) DataDirs(e *compose.Env) []string { return []string{e.Path("rocketmq")} }

// Endpoints implements compose.Endpointer: the name server.
func (*Cluster) Endpoints(*compose.Env) (map[string]string, error) {
	return map[string]string{rocketmqbroker.SettingNamesrv: rocketmqClusterNamesrv}, nil
}

// Install fetches RocketMQ's classpath, shared by the servers.
func (*Cluster) Install(ctx context.Context, e *compose.Env) error {
	return javaRuntime.Install(ctx, e)
}

// rocketmqBroker is one broker of the group.
type rocketmqBroker struct {
	name string // rocketmq-1 …
	port int    // listenPort
	dir  string // its store
}

func (b rocketmqBroker) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

func (*Cluster) brokers(e *compose.Env) []rocketmqBroker {
	out := make([]rocketmqBroker, len(rocketmqClusterPorts))
	for i, p := range rocketmqClusterPorts {
		out[i] = rocketmqBroker{name: fmt.Sprintf("rocketmq-%d", i+1), port: p, dir: e.Path("rocketmq", fmt.Sprintf("b%d", i+1))}
	}
	return out
}

func (*Cluster) brokerProc(e *compose.Env, b rocketmqBroker) compose.Proc {
	return compose.Proc{Name: b.name, PIDFile: e.Path("run", b.name+".pid"), LogFile: e.Path("logs", b.name+".log"),
		Match: []string{"org.apache.rocketmq.broker.BrokerStartup", b.name + ".conf"}, Home: e.Path("rocketmq")}
}

// Procs lists the brokers first: stopping in order stops them before the
// name server they unregister from.
func (c *Cluster) Procs(e *compose.Env) []compose.Proc {
	var out []compose.Proc
	for _, b := range c.brokers(e) {
		out = append(out, c.brokerProc(e, b))
	}
	return append(out, namesrvProc(e))
}

// Nodes implements compose.Cluster: the brokers (the name server and its
// controller are not a failover target).
func (c *Cluster) Nodes(e *compose.Env) []compose.Node {
	var out []compose.Node
	for _, b := range c.brokers(e) {
		out = append(out, compose.Node{Name: b.name, Addr: b.addr(), Proc: c.brokerProc(e, b)})
	}
	return out
}

// Ports implements compose.Porter.
func (c *Cluster) Ports(e *compose.Env) []compose.Port {
	out := []compose.Port{{Port: 59976, What: "name server"}, {Port: 59977, What: "controller (DLedger)"}}
	for _, b := range c.brokers(e) {
		out = append(out, compose.Port{Port: b.port, What: b.name}, compose.Port{Port: b.port - 2, What: b.name + " fast port"},
			compose.Port{Port: b.port + 1, What: b.name + " HA", AllInterfaces: HAExposure})
	}
	return out
}

// Logs are each JVM's output and its own log.
func (c *Cluster) Logs(e *compose.Env) []string {
	logs := e.Path("rocketmq", "logs", "rocketmqlogs")
	out := []string{namesrvProc(e).LogFile, filepath.Join(logs, "namesrv.log")}
	for _, b := range c.brokers(e) {
		out = append(out, c.brokerProc(e, b).LogFile, filepath.Join(b.dir, "logs", "rocketmqlogs", "broker.log"))
	}
	return out
}

// writeConfig renders the name server's and every broker's configuration.
func (c *Cluster) writeConfig(e *compose.Env) error {
	home := e.Path("rocketmq")
	host, nsPort, _ := net.SplitHostPort(rocketmqClusterNamesrv)
	_, ctlPort, _ := net.SplitHostPort(rocketmqClusterController)
	if err := writeTemplate(filepath.Join(home, "conf", "namesrv.properties"), "rocketmq-replicated-namesrv.properties", map[string]string{
		"Home": home, "NamesrvPort": nsPort, "ControllerPort": ctlPort, "Host": host, "ElectUnclean": "false",
	}); err != nil {
		return err
	}
	for _, b := range c.brokers(e) {
		if err := writeTemplate(filepath.Join(home, "conf", b.name+".conf"), "rocketmq-replicated-broker.conf", map[string]string{
			"Home": home, "NamesrvAddr": rocketmqClusterNamesrv, "ControllerAddr": rocketmqClusterController, "Host": host,
			"BrokerPort": strconv.Itoa(b.port), "FastPort": strconv.Itoa(b.port - 2), "HAPort": strconv.Itoa(b.port + 1),
			"StoreDir": b.dir, "AllAck": "true", "MinInSync": "2",
			"FlushDiskType": rocketmqFlushDiskType(compose.StartProfile(e, c)),
		}); err != nil {
			return err
		}
	}
	return nil
}

// DurabilitySettings implements compose.DurabilityAware, as the plain
// stack's.
func (*Cluster) DurabilitySettings(profile string) string {
	return rocketmqFlushDiskType(profile)
}

// Start launches the name server (with the controller) unless it runs,
// then every broker that does not.
func (c *Cluster) Start(ctx context.Context, e *compose.Env) error {
	java, err := javaRuntime.Launcher(ctx, e, c.writeConfig)
	if err != nil {
		return err
	}
	if err := (&Service{}).startNamesrv(java, e); err != nil {
		return err
	}
	for _, addr := range []string{rocketmqClusterNamesrv, rocketmqClusterController} {
		if err := compose.WaitListening(ctx, addr, namesrvProc(e), 90*time.Second); err != nil {
			return fmt.Errorf("rocketmq: the name server with the controller: %w", err)
		}
	}
	for _, b := range c.brokers(e) {
		if err := c.startBroker(java, e, b); err != nil {
			return err
		}
		// A broker still running keeps what a control changed at run
		// time: set the stack's settings back.
		if _, err := rocketmqRemoting().BrokerVersion(ctx, b.addr()); err == nil {
			if err := rocketmqRemoting().UpdateBrokerConfig(ctx, b.addr(), rocketmqSafe); err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
		}
	}
	return nil
}

// startBroker starts b unless it runs, its logs in its own directory.
func (c *Cluster) startBroker(java *compose.Launcher, e *compose.Env, b rocketmqBroker) error {
	p := c.brokerProc(e, b)
	if _, alive := p.PID(); alive {
		return nil
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return err
	}
	return java.Start(p, (&Service{}).jvm(e, server{main: "org.apache.rocketmq.broker.BrokerStartup", conf: e.Path("rocketmq", "conf", b.name+".conf"),
		logback: "rmq.broker.logback.xml", logHome: b.dir, heap: rocketmqClusterBrokerHeap}))
}

// group is the broker group as the name server sees it: broker id →
// address (id 0 is the master).
func (*Cluster) group(ctx context.Context) (map[string]string, error) {
	ci, err := rocketmqRemoting().ClusterInfo(ctx, rocketmqClusterNamesrv)
	if err != nil {
		return nil, err
	}
	for _, b := range ci.BrokerAddrTable {
		if b.BrokerName == Group {
			return b.BrokerAddrs, nil
		}
	}
	return map[string]string{}, nil
}

// Ready requires a master registered with the name server and all three
// brokers in the controller's SyncStateSet, each answering. (The name
// server's own list is not required to be complete: it drops a broker
// whose connection to it closed until its next registration, up to 30 s
// later, which a client's route does not need.)
func (c *Cluster) Ready(ctx context.Context, e *compose.Env) (string, error) {
	group, err := c.group(ctx)
	if err != nil {
		return "", err
	}
	if group["0"] == "" {
		return "", fmt.Errorf("rocketmq: no master of %s registered with the name server yet (%d brokers registered)", Group, len(group))
	}
	sync, err := rocketmqRemoting().SyncStateSet(ctx, rocketmqClusterController, Group)
	if err != nil {
		return "", err
	}
	if len(sync.InSync) < len(rocketmqClusterPorts) {
		return "", fmt.Errorf("rocketmq: %d of %d brokers of %s in the SyncStateSet (%s)", len(sync.InSync), len(rocketmqClusterPorts), Group, strings.Join(sync.InSync, ", "))
	}
	var version string
	for _, addr := range sync.InSync {
		v, err := rocketmqRemoting().BrokerVersion(ctx, addr)
		if err != nil {
			return "", err
		}
		version = v
		if err := safe(ctx, addr); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("RocketMQ %s, controller mode, %d brokers in sync", version, len(sync.InSync)), nil
}

// rocketmqSafe are the settings the failover controls change at run time
// (WeakSetting, Detach), as the stack starts the brokers with them.
var rocketmqSafe = map[string]string{"allAckInSyncStateSet": "true", "brokerPermission": "6", "haFlowControlEnable": "false"}

// safe says which setting of the broker at addr a control left changed
// (its restore failed, or the run was interrupted).
func safe(ctx context.Context, addr string) error {
	cfg, err := rocketmqRemoting().BrokerConfig(ctx, addr)
	if err != nil {
		return err
	}
	for k, v := range rocketmqSafe {
		if cfg[k] != v {
			return fmt.Errorf("rocketmq broker %s runs with %s=%s, not %s (a failover control's change left behind): `bench stack up --topology replicated rocketmq` sets it back", addr, k, cfg[k], v)
		}
	}
	return nil
}

// Stop stops the brokers, then the name server.
func (c *Cluster) Stop(ctx context.Context, e *compose.Env) error {
	var errs []error
	for _, p := range c.Procs(e) {
		errs = append(errs, p.Kill(ctx, 30*time.Second))
	}
	return errors.Join(errs...)
}

// NodeStatus implements compose.Cluster: a broker is healthy when it answers; its
// role is master or slave as the name server routes it, with whether the
// controller counts it in the SyncStateSet.
func (c *Cluster) NodeStatus(ctx context.Context, e *compose.Env) []compose.NodeStatus {
	nodes := c.Nodes(e)
	out := make([]compose.NodeStatus, len(nodes))
	group, gerr := c.group(ctx)
	sync, serr := rocketmqRemoting().SyncStateSet(ctx, rocketmqClusterController, Group)
	for i, n := range nodes {
		out[i].Node = n
		if _, err := rocketmqRemoting().BrokerVersion(ctx, n.Addr); err != nil {
			out[i].Detail = err.Error()
			continue
		}
		out[i].Healthy = true
		switch {
		case gerr != nil:
			out[i].Detail = "role unknown: " + gerr.Error()
			continue
		case group["0"] == n.Addr:
			out[i].Role = "master"
		case slices.Contains(mapValues(group), n.Addr):
			out[i].Role = "slave"
		default:
			out[i].Role = "unregistered"
		}
		switch {
		case serr != nil:
			out[i].Detail = "SyncStateSet unknown: " + serr.Error()
		case slices.Contains(sync.InSync, n.Addr):
			out[i].Role += ", in sync"
		default:
			if out[i].Role == "slave" {
				out[i].Detail = "out of the SyncStateSet: a slave catches up within seconds of a restart; one still out after minutes has stalled (restart the group: 'bench stack down --topology replicated rocketmq', then 'up')"
			}
			out[i].Role += ", not in sync"
		}
	}
	return out
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Leaders implements compose.Cluster: the master of the broker group holding the
// topic resource (every topic of this stack lives on broker-a); "" asks
// for the group's master.
func (c *Cluster) Leaders(ctx context.Context, e *compose.Env, resource string) ([]compose.Node, error) {
	if resource != "" {
		n, err := rocketmqRemoting().RouteQueues(ctx, rocketmqClusterNamesrv, resource)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("rocketmq: the name server routes no topic %s", resource)
		}
	}
	group, err := c.group(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes(e) {
		if group["0"] == n.Addr {
			return []compose.Node{n}, nil
		}
	}
	return nil, fmt.Errorf("rocketmq: %s has no master registered with the name server (brokers %v)", Group, group)
}

// FailureTimeout implements compose.FailureDetector: a broker whose heartbeats
// stop is inactive after controllerHeartBeatTimeoutMills (6 s), found by
// the controller's scan every 2 s.
func (*Cluster) FailureTimeout() time.Duration { return 10 * time.Second }

// WeakSetting implements compose.Weakener: allAckInSyncStateSet=false, set on
// every broker at run time (UPDATE_BROKER_CONFIG) and restored after:
// the master answers a send once it has stored the message
// (inSyncReplicas=1), whatever its slaves have. A slave that lags (a
// paused one) stays in the SyncStateSet for haMaxTimeSlaveNotCatchup
// (15 s) and may be elected with less than the master confirmed.
func (c *Cluster) WeakSetting() compose.Weakness {
	return compose.Weakness{Name: "allAckInSyncStateSet=false (the master confirms a send without its slaves)",
		Apply: func(ctx context.Context, e *compose.Env) (func(context.Context) error, error) {
			set := func(ctx context.Context, v string) error {
				var errs []error
				for _, b := range c.brokers(e) {
					if err := rocketmqRemoting().UpdateBrokerConfig(ctx, b.addr(), map[string]string{"allAckInSyncStateSet": v}); err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", b.name, err))
					}
				}
				return errors.Join(errs...)
			}
			restore := func(ctx context.Context) error { return set(ctx, "true") }
			if err := set(ctx, "false"); err != nil {
				return restore, err // undo it where it took
			}
			return restore, nil
		}}
}

// Detach implements compose.Lagger. A paused slave falls behind only by what its
// socket buffers cannot hold: the master pushes replication data (HA),
// and the kernels of both ends keep hundreds of KiB of it, which the
// slave reads when it resumes, even from a master killed meanwhile
// (measured: 73 of about 1,000 messages confirmed during a 5 s pause
// were missing from the new master). So the master's HA flow control is
// set to zero bytes per second at run time (UPDATE_BROKER_CONFIG:
// haFlowControlEnable, maxHaTransferByteInSecond): the slaves stay
// connected and in the SyncStateSet for haMaxTimeSlaveNotCatchup (15 s)
// while they receive nothing. A RocketMQ master also serves what it
// stored to consumers at once, so a consumer that keeps up would read
// what the slaves lack before it is lost (measured: none of 1,000 such
// messages went missing from the consumer's view): the master is made
// write-only meanwhile (brokerPermission=2), as a consumer backlog would
// hold them back. resume lifts both (a killed master restarts from its
// configuration file, which the stack rewrites without them).
func (c *Cluster) Detach(ctx context.Context, e *compose.Env, leader compose.Node) (func(context.Context) error, error) {
	set := func(ctx context.Context, on bool) error {
		kv := map[string]string{"haFlowControlEnable": "false", "maxHaTransferByteInSecond": "104857600", "brokerPermission": "6"}
		if on {
			kv = map[string]string{"maxHaTransferByteInSecond": "0", "haFlowControlEnable": "true", "brokerPermission": "2"}
		}
		return rocketmqRemoting().UpdateBrokerConfig(ctx, leader.Addr, kv)
	}
	resume := func(ctx context.Context) error {
		if !leader.Proc.Running() {
			return nil // killed: nothing to lift
		}
		err := set(ctx, false)
		if err == nil {
			return nil
		}
		// A master killed a moment ago still runs while it dies: its
		// refusal is not an error once it is gone.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if !leader.Proc.Running() {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return err
	}
	return resume, set(ctx, true)
}
