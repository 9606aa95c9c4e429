// Package kafka is the local stack's Apache Kafka, run on the JVM from
// Maven Central artifacts: the plain stack's single KRaft node (Service),
// the replicated stack's three nodes (Cluster) and the secure stack's
// SASL_SSL node (Secure). It registers them as "kafka" (package compose
// says how services work).
package kafka

// Native Apache Kafka: a single KRaft node (broker and controller in one
// JVM) run from Maven Central artifacts.
//
//   - Version: org.apache.kafka:kafka_2.13 4.4.0, the newest release
//     Maven Central serves: share groups (KIP-932, the kafka-share driver)
//     are production-ready from 4.2, and 4.4's broker is still built for
//     Java 17 (class files of major version 61), the Java Debian 12 ships
//     and `bench stack up` installs (docs/stack.md says more). Plus log4j2
//     (log4j-core and the SLF4J 2 binding log4j-slf4j2-impl with slf4j-api
//     2.x: Kafka itself pulls slf4j-api 1.7, which would not see the 2.x
//     binding and would log nothing).
//   - Storage is formatted once with kafka.tools.StorageTool and a fixed
//     cluster id; the quorum is static (controller.quorum.voters), so no
//     --standalone. Data persists across `stack down`/`up`.
//   - Heap: -Xms256m -Xmx512m (G1), direct memory capped at 256 MiB.
//   - Layout under the stack directory:
//     kafka/lib          the classpath (mvn dependency:copy-dependencies)
//     kafka/config       server.properties, log4j2.xml (rewritten on start)
//     kafka/data         log.dirs (meta.properties marks a formatted store)
//     kafka/logs         server.log, controller.log (log4j2)
//     logs/kafka.log     the JVM's stdout/stderr
//     run/kafka.pid

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/compose"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// Version is the Kafka release the native stack runs.
	Version = "4.4.0"
	// ControllerAddr is the KRaft controller listener of the native
	// stack (the broker listener is kafkabroker.DefaultBrokers).
	ControllerAddr = "127.0.0.1:59093"
	// kafkaClusterID is base64url("inboxbench-kafka"): fixed, so a
	// re-format after a lost meta.properties yields the same cluster.
	kafkaClusterID = "aW5ib3hiZW5jaC1rYWZrYQ"
	kafkaLog4jVer  = "2.25.3"
	kafkaSLF4JVer  = "2.0.17"
)

// kafkaHeap is the JVM memory of the native broker (docs/stack.md lists it).
var kafkaHeap = []string{"-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m"}

// javaRuntime is Kafka's classpath, in every variant's stack.
var javaRuntime = compose.JavaRuntime{Name: "kafka", Version: Version, Dir: "kafka", Deps: []string{
	"org.apache.kafka:kafka_2.13:" + Version,
	"org.apache.logging.log4j:log4j-core:" + kafkaLog4jVer,
	"org.apache.logging.log4j:log4j-slf4j2-impl:" + kafkaLog4jVer,
	"org.slf4j:slf4j-api:" + kafkaSLF4JVer,
}}

// Service is the native single-node KRaft Kafka of the local stack.
type Service struct {
	// inst is the node this service runs; nil: the plain stack's
	// (plainKafka). The secure variant's is in secure.go.
	inst *kafkaInstance
}

// kafkaInstance is what differs between the stacks' Kafka nodes.
type kafkaInstance struct {
	broker     string // the client listener when the configuration names none on loopback
	controller string
	// listeners is server.properties' listener section for the client
	// listener addr; format adds arguments to the storage format (SCRAM
	// users), into a file the JVM reads, so none is on a command line.
	listeners func(e *compose.Env, addr string) (string, error)
	format    func(e *compose.Env) ([]string, error)
}

// The plain stack's broker has a second client listener, OUTSIDE, for a
// service under test: it advertises the address of the proxy the suite
// runs in front of it, so every connection of the service passes the
// proxy (kafkabroker.SettingOutsideListener says why).
var plainKafka = &kafkaInstance{broker: kafkabroker.DefaultBrokers, controller: ControllerAddr,
	listeners: func(_ *compose.Env, addr string) (string, error) {
		proxy, upstream, _ := strings.Cut(kafkabroker.DefaultOutsideListener, "=")
		return "listeners=PLAINTEXT://" + addr + ",CONTROLLER://" + ControllerAddr + ",OUTSIDE://" + upstream + "\n" +
			"advertised.listeners=PLAINTEXT://" + addr + ",OUTSIDE://" + proxy + "\n" +
			"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,OUTSIDE:PLAINTEXT\n" +
			"controller.listener.names=CONTROLLER\n" +
			"inter.broker.listener.name=PLAINTEXT", nil
	}}

func (k *Service) instance() *kafkaInstance {
	if k.inst == nil {
		return plainKafka
	}
	return k.inst
}

func init() {
	compose.Register("kafka", 3, compose.Variants{
		compose.VariantPlain:      func() compose.Service { return &Service{} },
		compose.VariantReplicated: func() compose.Service { return &Cluster{} },
		compose.VariantSecure:     func() compose.Service { return newSecure() },
	})
}

// Name is "kafka".
func (*Service) Name() string { return "kafka" }

// Packages are Java and Maven.
func (*Service) Packages() []compose.Package { return compose.JavaPackages() }

// DataDirs implements compose.Wiper: the log directory and the logs.
func (*Service) DataDirs(e *compose.Env) []string {
	return []string{e.Path("kafka", "data"), e.Path("kafka", "logs")}
}

// Addr is the configured seeds.
func (*Service) Addr(e *compose.Env) string {
	return strings.Join(e.Cfg.List(kafkabroker.SettingBrokers), ",")
}

// Install fetches Kafka's classpath (javaRuntime).
func (*Service) Install(ctx context.Context, e *compose.Env) error {
	return javaRuntime.Install(ctx, e)
}

func (*Service) proc(e *compose.Env) compose.Proc {
	return compose.Proc{Name: "kafka", PIDFile: e.Path("run", "kafka.pid"), LogFile: e.Path("logs", "kafka.log"),
		Match: []string{"kafka.Kafka"}, Home: e.Path("kafka")}
}

// node is the stack's one JVM.
func (*Service) node(e *compose.Env) jvmNode {
	return jvmNode{dir: e.Path("kafka"), heap: kafkaHeap, clusterID: kafkaClusterID}
}

// Procs is the node's JVM.
func (k *Service) Procs(e *compose.Env) []compose.Proc { return []compose.Proc{k.proc(e)} }

// DurabilitySettings implements compose.DurabilityAware: the fsync
// profile sets log.flush.interval.messages.
func (*Service) DurabilitySettings(profile string) string {
	if profile == compose.DurabilityFsync {
		return "log.flush.interval.messages=1"
	}
	return ""
}

// Ports implements compose.Porter: the broker and the KRaft controller
// listeners, and the plain stack's listener for services under test.
func (k *Service) Ports(e *compose.Env) []compose.Port {
	var out []compose.Port
	addrs := []string{k.brokerAddr(e), k.instance().controller}
	if k.instance() == plainKafka {
		_, upstream, _ := strings.Cut(kafkabroker.DefaultOutsideListener, "=")
		addrs = append(addrs, upstream)
	}
	for _, a := range addrs {
		if _, p, err := net.SplitHostPort(a); err == nil {
			n, _ := strconv.Atoi(p)
			out = append(out, compose.Port{Port: n, What: "Kafka"})
		}
	}
	return out
}

// Logs are the JVM's output, the broker's and the controller's logs, and
// the storage format's.
func (k *Service) Logs(e *compose.Env) []string {
	return []string{k.proc(e).LogFile, e.Path("kafka", "logs", "server.log"), e.Path("kafka", "logs", "controller.log"), e.Path("logs", "kafka-format.log")}
}

// brokerAddr is the listener the native broker binds: the first
// configured seed when it is a loopback address, else the instance's.
func (k *Service) brokerAddr(e *compose.Env) string {
	return compose.LoopbackOr(e.Cfg.List(kafkabroker.SettingBrokers), k.instance().broker)
}

// writeConfig renders server.properties (0600: a secure node's holds
// its own login) and log4j2.xml.
func (k *Service) writeConfig(e *compose.Env) error {
	listeners, err := k.instance().listeners(e, k.brokerAddr(e))
	if err != nil {
		return err
	}
	n := k.node(e)
	data := map[string]string{
		"Listeners":          listeners,
		"ControllerAddr":     k.instance().controller,
		"DataDir":            filepath.Join(n.dir, "data"),
		"DurabilitySettings": "",
	}
	if k.DurabilitySettings(compose.StartProfile(e, k)) != "" {
		data["DurabilitySettings"] = "\n# Durability profile fsync: fsync the log after every append, before the\n" +
			"# produce response (Kafka's default leaves flushing to the OS and relies\n" +
			"# on replication, which a single node does not have).\nlog.flush.interval.messages=1"
	}
	return n.writeConfig("kafka-server.properties", data)
}

// Start writes the configuration, formats the storage on the first start
// and starts the JVM.
func (k *Service) Start(ctx context.Context, e *compose.Env) error {
	java, err := javaRuntime.Launcher(ctx, e, k.writeConfig)
	if err != nil {
		return err
	}
	if err := k.node(e).format(ctx, java, e, k.instance().format); err != nil {
		return fmt.Errorf("kafka: format storage: %w", err)
	}
	return java.Start(k.proc(e), k.node(e).server())
}

// Ready sends a metadata request to the configured seeds and requires at
// least one broker; a broker of ours running this release gets share
// groups on (shareGroups).
// The version is the installed Maven version when the running broker is
// ours, else a guess from ApiVersions.
func (k *Service) Ready(ctx context.Context, e *compose.Env) (string, error) {
	opts, err := kafkabroker.ClientOpts(e.Cfg)
	if err != nil {
		return "", err
	}
	opts = append(opts, kgo.DialTimeout(3*time.Second), kgo.RetryTimeout(5*time.Second))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return "", fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka metadata from %s: %w", k.Addr(e), kafkabroker.Explain(e.Cfg, err))
	}
	if len(md.Brokers) == 0 {
		return "", fmt.Errorf("kafka at %s: metadata lists no broker", k.Addr(e))
	}
	if _, ours := k.proc(e).PID(); ours {
		if v := javaRuntime.InstalledVersion(e); v != "" {
			return "Kafka " + v, shareGroups(ctx, e, adm)
		}
	}
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return "Kafka (version unknown)", nil
	}
	for _, v := range vs.Sorted() {
		if v.Err == nil {
			return "Kafka (guess: " + v.VersionGuess() + ")", nil
		}
	}
	return "Kafka (version unknown)", nil
}

// shareGroups finalizes share.version 1 (share groups, the kafka-share
// driver) on a cluster whose brokers support it but have it off: a store
// formatted by Kafka 4.1 or earlier keeps its finalized features when the
// stack moves to a newer release, while a new one is formatted with the
// release's (share.version 2 on 4.4). Level 1 is enough for share groups
// and leaves metadata.version alone, so the store still starts under the
// release that formatted it (4.1 supports share.version 1).
//
// It acts only on a broker running this release (the installed classpath
// is Version's): `bench stack status` of a newer bench must not change a
// broker an older one started.
func shareGroups(ctx context.Context, e *compose.Env, adm *kadm.Client) error {
	if javaRuntime.InstalledVersion(e) != Version {
		return nil
	}
	level, supported, err := kafkabroker.Feature(ctx, adm, kafkabroker.ShareFeature)
	if err != nil || level >= 1 || supported < 1 {
		return err
	}
	res, err := adm.UpdateFeatures(ctx, false, kadm.FeatureUpdate{Feature: kafkabroker.ShareFeature, MaxVersionLevel: 1, UpgradeType: 1})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: turn share groups on (finalize %s=1): %w", kafkabroker.ShareFeature, err)
	}
	return nil
}
