package compose

// Native Apache Kafka: a single KRaft node (broker and controller in one
// JVM) run from Maven Central artifacts.
//
//   - Version: org.apache.kafka:kafka_2.13 4.1.2 (Kafka 4.x brokers need
//     Java 17+; 4.1.2 runs on the Debian Java 17 and is a patch release of
//     a mature 4.x line), plus log4j2 (log4j-core and the
//     SLF4J 2 binding log4j-slf4j2-impl with slf4j-api 2.x: Kafka itself
//     pulls slf4j-api 1.7, which would not see the 2.x binding and would log
//     nothing).
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
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// KafkaVersion is the Kafka release the native stack runs.
	KafkaVersion = "4.1.2"
	// KafkaControllerAddr is the KRaft controller listener of the native
	// stack (the broker listener is kafkabroker.DefaultBrokers).
	KafkaControllerAddr = "127.0.0.1:59093"
	// kafkaClusterID is base64url("inboxbench-kafka"): fixed, so a
	// re-format after a lost meta.properties yields the same cluster.
	kafkaClusterID = "aW5ib3hiZW5jaC1rYWZrYQ"
	kafkaLog4jVer  = "2.25.3"
	kafkaSLF4JVer  = "2.0.17"
)

// kafkaHeap is the JVM memory of the native broker (docs/stack.md lists it).
var kafkaHeap = []string{"-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m"}

// Kafka is the native single-node KRaft Kafka of the local stack.
type Kafka struct {
	// inst is the node this service runs; nil: the plain stack's
	// (plainKafka). The secure variant's is in secure_kafka.go.
	inst *kafkaInstance
}

// kafkaInstance is what differs between the stacks' Kafka nodes.
type kafkaInstance struct {
	broker     string // the client listener when the configuration names none on loopback
	controller string
	// listeners is server.properties' listener section for the client
	// listener addr; format adds arguments to the storage format (SCRAM
	// users), into a file the JVM reads, so none is on a command line.
	listeners func(e *Env, addr string) (string, error)
	format    func(e *Env) ([]string, error)
}

var plainKafka = &kafkaInstance{broker: kafkabroker.DefaultBrokers, controller: KafkaControllerAddr,
	listeners: func(_ *Env, addr string) (string, error) {
		return "listeners=PLAINTEXT://" + addr + ",CONTROLLER://" + KafkaControllerAddr + "\n" +
			"advertised.listeners=PLAINTEXT://" + addr + "\n" +
			"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n" +
			"controller.listener.names=CONTROLLER\n" +
			"inter.broker.listener.name=PLAINTEXT", nil
	}}

func (k *Kafka) instance() *kafkaInstance {
	if k.inst == nil {
		return plainKafka
	}
	return k.inst
}

var _ Service = (*Kafka)(nil)

func init() { register(3, &Kafka{}) }

func (*Kafka) Name() string { return "kafka" }

func (*Kafka) Packages() []Package { return javaPackages() }

// DataDirs are removed by `bench stack down --wipe` (the Maven artifacts
// stay: they are a cache, not data).
func (*Kafka) DataDirs(e *Env) []string {
	return []string{e.Path("kafka", "data"), e.Path("kafka", "logs")}
}

func (*Kafka) Addr(e *Env) string { return strings.Join(e.Cfg.List(kafkabroker.SettingBrokers), ",") }

func (*Kafka) runtime() mavenRuntime {
	return mavenRuntime{
		Name:    "kafka",
		Version: KafkaVersion,
		Deps: []mavenDep{
			{"org.apache.kafka", "kafka_2.13", KafkaVersion},
			{"org.apache.logging.log4j", "log4j-core", kafkaLog4jVer},
			{"org.apache.logging.log4j", "log4j-slf4j2-impl", kafkaLog4jVer},
			{"org.slf4j", "slf4j-api", kafkaSLF4JVer},
		},
	}
}

func (k *Kafka) Install(ctx context.Context, e *Env) error {
	if _, err := javaBinary(ctx, 17); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	if err := k.runtime().install(ctx, e, e.Path("kafka")); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

func (*Kafka) proc(e *Env) Proc {
	return Proc{Name: "kafka", PIDFile: e.Path("run", "kafka.pid"), LogFile: e.Path("logs", "kafka.log"),
		Match: []string{"kafka.Kafka"}, Home: e.Path("kafka")}
}

func (k *Kafka) Procs(e *Env) []Proc { return []Proc{k.proc(e)} }

// durabilitySettings: the fsync profile sets log.flush.interval.messages.
func (*Kafka) durabilitySettings(profile string) string {
	if profile == DurabilityFsync {
		return "log.flush.interval.messages=1"
	}
	return ""
}

// Ports implements Porter: the broker and the KRaft controller listeners.
func (k *Kafka) Ports(e *Env) []Port {
	var out []Port
	for _, a := range []string{k.brokerAddr(e), k.instance().controller} {
		if _, p, err := net.SplitHostPort(a); err == nil {
			n, _ := strconv.Atoi(p)
			out = append(out, Port{Port: n, What: "Kafka"})
		}
	}
	return out
}

func (k *Kafka) Logs(e *Env) []string {
	return []string{k.proc(e).LogFile, e.Path("kafka", "logs", "server.log"), e.Path("kafka", "logs", "controller.log"), e.Path("logs", "kafka-format.log")}
}

// brokerAddr is the listener the native broker binds: the first
// configured seed when it is a loopback address, else the instance's.
func (k *Kafka) brokerAddr(e *Env) string {
	return loopbackOr(e.Cfg.List(kafkabroker.SettingBrokers), k.instance().broker)
}

// kafkaCommand is the broker's JVM command line.
func (k *Kafka) command(java string, e *Env) *exec.Cmd {
	dir := e.Path("kafka")
	args := append([]string{}, kafkaHeap...)
	args = append(args,
		"-server",
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
		"-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true",
		"-Dkafka.logs.dir="+filepath.Join(dir, "logs"),
		"-Dlog4j2.configurationFile="+filepath.Join(dir, "config", "log4j2.xml"),
		"-cp", classpath(filepath.Join(dir, "lib")),
	)
	cmd := exec.Command(java, append(args, "kafka.Kafka", filepath.Join(dir, "config", "server.properties"))...)
	cmd.Dir = dir
	return cmd
}

// writeConfig renders server.properties (0600: a secure node's holds
// its own login) and log4j2.xml.
func (k *Kafka) writeConfig(e *Env) error {
	dir := e.Path("kafka")
	listeners, err := k.instance().listeners(e, k.brokerAddr(e))
	if err != nil {
		return err
	}
	data := map[string]string{
		"Listeners":          listeners,
		"ControllerAddr":     k.instance().controller,
		"DataDir":            filepath.Join(dir, "data"),
		"DurabilitySettings": "",
	}
	if (&Kafka{}).durabilitySettings(startProfile(e, &Kafka{})) != "" {
		data["DurabilitySettings"] = "\n# Durability profile fsync: fsync the log after every append, before the\n" +
			"# produce response (Kafka's default leaves flushing to the OS and relies\n" +
			"# on replication, which a single node does not have).\nlog.flush.interval.messages=1"
	}
	if err := writeTemplate(filepath.Join(dir, "config", "server.properties"), "kafka-server.properties", data); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(dir, "config", "server.properties"), 0o600); err != nil {
		return err
	}
	if err := writeTemplate(filepath.Join(dir, "config", "log4j2.xml"), "kafka-log4j2.xml", map[string]string{}); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
}

func (k *Kafka) Start(ctx context.Context, e *Env) error {
	java, err := javaBinary(ctx, 17)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	dir := e.Path("kafka")
	if installedVersion(dir) == "" {
		return fmt.Errorf("kafka: %s is not installed: run the install step first (bench stack up)", filepath.Join(dir, "lib"))
	}
	if err := k.writeConfig(e); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	// Format the KRaft storage once; meta.properties marks it formatted.
	if _, err := os.Stat(filepath.Join(dir, "data", "meta.properties")); errors.Is(err, os.ErrNotExist) {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		args := []string{"-Xmx256m",
			"-Dlog4j2.configurationFile=" + filepath.Join(dir, "config", "log4j2.xml"),
			"-Dkafka.logs.dir=" + filepath.Join(dir, "logs"),
			"-cp", classpath(filepath.Join(dir, "lib")),
			"kafka.tools.StorageTool", "format",
			"--cluster-id", kafkaClusterID,
			"--config", filepath.Join(dir, "config", "server.properties"),
			"--ignore-formatted"}
		if f := k.instance().format; f != nil {
			more, err := f(e)
			if err != nil {
				return fmt.Errorf("kafka: format storage: %w", err)
			}
			args = append(args, more...)
		}
		// The arguments go in a file the launcher reads (@argfile, 0600,
		// removed after): a SCRAM user's password must not be on a
		// command line, where every user of the host can read it.
		argfile := filepath.Join(dir, "config", "format.args")
		if err := WriteJavaArgFile(argfile, args); err != nil {
			return fmt.Errorf("kafka: format storage: %w", err)
		}
		defer os.Remove(argfile)
		cmd := exec.CommandContext(fctx, java, "@"+argfile)
		cmd.Dir = dir
		if err := RunLogged(fctx, e.Path("logs", "kafka-format.log"), cmd); err != nil {
			return fmt.Errorf("kafka: format storage: %w", err)
		}
	}
	if err := StartDetached(k.proc(e), k.command(java, e)); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

// Ready sends a metadata request to the configured seeds and requires at
// least one broker. The version is the installed Maven version when the
// running broker is ours, else a guess from ApiVersions.
func (k *Kafka) Ready(ctx context.Context, e *Env) (string, error) {
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
		if v := installedVersion(e.Path("kafka")); v != "" {
			return "Kafka " + v, nil
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
