package compose

// Native Apache RocketMQ: one name server and one broker (master, broker-a
// in DefaultCluster), each a JVM run from Maven Central artifacts.
//
//   - Version: org.apache.rocketmq:rocketmq-namesrv and rocketmq-broker
//     5.3.3. The v2 Go client (rocketmq-client-go/v2) speaks the classic
//     remoting protocol, which the 5.x broker still serves on its
//     listenPort (the gRPC proxy of 5.x is not started and not needed).
//     Send with a sharding key (hash selector), push-consume in orderly
//     mode, the admin API (CreateTopic/DeleteTopic) and route queries were
//     verified against it with rocketmq-client-go/v2, so falling back to
//     a 4.9.x broker (same Maven coordinates, older version) is not needed.
//   - Ports: name server 59876; broker listenPort 50911, from which the
//     broker derives fastListenPort 50909 (listenPort-2, the "VIP channel")
//     and haListenPort 50912 (listenPort+1). No other service of the stack
//     uses those. Loopback only: bindAddress=127.0.0.1 for the remoting
//     ports; the name server's scanAvailableNameSrv=false, else it probes
//     its own first non-loopback interface address every 3 s. The HA port
//     has no bind setting in 5.x (DefaultHAService binds the wildcard
//     address) and listens on all interfaces without authentication: the
//     one exception to loopback, allowed by `bench stack status` with the
//     reason below; docs/stack.md says how to firewall it.
//   - Readiness: the broker normally registers at boot; now and then the
//     first registration only lands with the periodic one 10 s later, so
//     allow ~20 s from Start to Ready.
//   - Memory: the stock scripts ask for 4–8 GB heaps; here the name server
//     runs with -Xms128m -Xmx256m and the broker with -Xms256m -Xmx512m,
//     direct memory capped at 64 MiB and 256 MiB. The broker's commitlog
//     files are 128 MiB (default 1 GiB), consume-queue and index files a
//     few MB, so resident memory and disk stay small.
//   - Java 17: --add-opens/--add-exports for java.nio, sun.nio.ch,
//     jdk.internal.ref/misc and java.lang (mmap'ed file cleanup, Netty).
//   - user.home is the stack's rocketmq directory, so the logback logs
//     (rocketmq/logs/rocketmqlogs/*.log) and anything else the JVMs write
//     "at home" stay under the stack directory; ROCKETMQ_HOME and
//     -Drocketmq.home.dir point there too.
//   - Layout under the stack directory:
//     rocketmq/lib                     the classpath (mvn dependency:copy-dependencies)
//     rocketmq/conf                    namesrv.properties, broker.conf (rewritten on start)
//     rocketmq/store                   the broker's store (persists across down/up)
//     rocketmq/logs/rocketmqlogs       namesrv.log, broker.log, ...
//     logs/rocketmq-namesrv.log, logs/rocketmq-broker.log   JVM stdout/stderr
//     run/rocketmq-namesrv.pid, run/rocketmq-broker.pid

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

	rocketmqbroker "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/config"
)

const (
	// RocketMQVersion is the RocketMQ release the native stack runs.
	RocketMQVersion = "5.3.3"
	// RocketMQBrokerAddr is the broker's remoting address in the native
	// stack (clients learn it from the name server's routes).
	RocketMQBrokerAddr = "127.0.0.1:50911"
	// RocketMQCluster is the cluster name of the native broker.
	RocketMQCluster = "DefaultCluster"
)

var (
	rocketmqNamesrvHeap = []string{"-Xms128m", "-Xmx256m", "-XX:MaxDirectMemorySize=64m"}
	rocketmqBrokerHeap  = []string{"-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m"}
	// rocketmqJava17 opens what RocketMQ and its Netty reach by reflection.
	rocketmqJava17 = []string{
		"--add-opens=java.base/java.nio=ALL-UNNAMED",
		"--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
		"--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
		"--add-opens=java.base/java.lang=ALL-UNNAMED",
		"--add-opens=java.base/java.util=ALL-UNNAMED",
		"--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
		"--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
		"--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
		"-Dio.netty.tryReflectionSetAccessible=true",
	}
)

// RocketMQ is the native name server + broker of the local stack.
type RocketMQ struct {
	// inst is what this service runs; nil: the plain stack's
	// (plainRocketMQ). The secure variant's is in secure_rocketmq.go.
	inst *rocketmqInstance
}

// rocketmqInstance is what differs between the stacks' RocketMQs.
type rocketmqInstance struct {
	namesrv                 string // when the configuration names none on loopback
	broker, fast, ha        int    // the broker's ports (fast = broker-2, HA = broker+1)
	what                    string // how status names the remoting ports
	jvm                     func(e *Env) []string
	namesrvConf, brokerConf func(e *Env) (string, error) // appended to the rendered files
}

var plainRocketMQ = &rocketmqInstance{namesrv: rocketmqbroker.DefaultNamesrv, broker: 50911, fast: 50909, ha: 50912, what: ""}

func (r *RocketMQ) instance() *rocketmqInstance {
	if r.inst == nil {
		return plainRocketMQ
	}
	return r.inst
}

var _ Service = (*RocketMQ)(nil)

func init() { register(4, &RocketMQ{}) }

func (*RocketMQ) Name() string { return "rocketmq" }

func (*RocketMQ) Packages() []Package { return javaPackages() }

// DataDirs are removed by `bench stack down --wipe`.
func (*RocketMQ) DataDirs(e *Env) []string {
	return []string{e.Path("rocketmq", "store"), e.Path("rocketmq", "logs"), e.Path("rocketmq", "namesrv")}
}

func (*RocketMQ) Addr(e *Env) string {
	return strings.Join(e.Cfg.List(rocketmqbroker.SettingNamesrv), ",")
}

func (*RocketMQ) runtime() mavenRuntime {
	return mavenRuntime{
		Name:    "rocketmq",
		Version: RocketMQVersion,
		Deps: []mavenDep{
			{"org.apache.rocketmq", "rocketmq-broker", RocketMQVersion},
			{"org.apache.rocketmq", "rocketmq-namesrv", RocketMQVersion},
		},
	}
}

func (r *RocketMQ) Install(ctx context.Context, e *Env) error {
	if _, err := javaBinary(ctx, 17); err != nil {
		return fmt.Errorf("rocketmq: %w", err)
	}
	if err := r.runtime().install(ctx, e, e.Path("rocketmq")); err != nil {
		return fmt.Errorf("rocketmq: %w", err)
	}
	return nil
}

func (*RocketMQ) namesrvProc(e *Env) Proc {
	return Proc{Name: "rocketmq-namesrv", PIDFile: e.Path("run", "rocketmq-namesrv.pid"), LogFile: e.Path("logs", "rocketmq-namesrv.log"),
		Match: []string{"org.apache.rocketmq.namesrv.NamesrvStartup"}, Home: e.Path("rocketmq")}
}

func (*RocketMQ) brokerProc(e *Env) Proc {
	return Proc{Name: "rocketmq-broker", PIDFile: e.Path("run", "rocketmq-broker.pid"), LogFile: e.Path("logs", "rocketmq-broker.log"),
		Match: []string{"org.apache.rocketmq.broker.BrokerStartup"}, Home: e.Path("rocketmq")}
}

// Procs lists the broker first so that stopping in order stops the broker
// before the name server it unregisters from.
func (r *RocketMQ) Procs(e *Env) []Proc { return []Proc{r.brokerProc(e), r.namesrvProc(e)} }

// RocketMQHAExposure is why the broker's HA port listens on every
// interface, and what guards it (docs/stack.md, "Loopback only").
const RocketMQHAExposure = "RocketMQ 5.3.3 has no bind setting for its HA port; firewall it (docs/stack.md, Loopback only)"

// Ports implements Porter: the name server, the broker's remoting port and
// fast port, and its HA port, which RocketMQ binds to every interface.
func (r *RocketMQ) Ports(e *Env) []Port {
	in := r.instance()
	_, ns, _ := net.SplitHostPort(r.namesrvAddr(e))
	nsPort, _ := strconv.Atoi(ns)
	return []Port{{Port: nsPort, What: "name server" + in.what}, {Port: in.broker, What: "broker" + in.what}, {Port: in.fast, What: "broker fast port" + in.what},
		{Port: in.ha, What: "broker HA", AllInterfaces: RocketMQHAExposure}}
}

func (r *RocketMQ) Logs(e *Env) []string {
	logs := e.Path("rocketmq", "logs", "rocketmqlogs")
	return []string{
		r.namesrvProc(e).LogFile, filepath.Join(logs, "namesrv.log"),
		r.brokerProc(e).LogFile, filepath.Join(logs, "broker.log"), filepath.Join(logs, "broker_default.log"),
	}
}

// namesrvAddr is the address the native name server binds: the first
// configured name server when it is a loopback address, else the
// instance's.
func (r *RocketMQ) namesrvAddr(e *Env) string {
	return loopbackOr(e.Cfg.List(rocketmqbroker.SettingNamesrv), r.instance().namesrv)
}

// durabilitySettings: the fsync profile sets flushDiskType=SYNC_FLUSH.
func (*RocketMQ) durabilitySettings(profile string) string { return rocketmqFlushDiskType(profile) }

func rocketmqFlushDiskType(profile string) string {
	if profile == DurabilityFsync {
		return "SYNC_FLUSH"
	}
	return "ASYNC_FLUSH"
}

func (r *RocketMQ) writeConfig(e *Env) error {
	in := r.instance()
	home := e.Path("rocketmq")
	nsAddr := r.namesrvAddr(e)
	_, nsPort, _ := net.SplitHostPort(nsAddr)
	host, _, _ := net.SplitHostPort(RocketMQBrokerAddr)
	extra := func(f func(*Env) (string, error)) (string, error) {
		if f == nil {
			return "", nil
		}
		return f(e)
	}
	nsExtra, err := extra(in.namesrvConf)
	if err != nil {
		return err
	}
	brokerExtra, err := extra(in.brokerConf)
	if err != nil {
		return err
	}
	if err := writeTemplate(filepath.Join(home, "conf", "namesrv.properties"), "rocketmq-namesrv.properties", map[string]string{
		"Home": home, "NamesrvPort": nsPort, "Host": "127.0.0.1", "Extra": nsExtra,
	}); err != nil {
		return err
	}
	// 0600: a secure broker's holds its initial user.
	conf := filepath.Join(home, "conf", "broker.conf")
	if err := writeTemplate(conf, "rocketmq-broker.conf", map[string]string{
		"Home": home, "NamesrvAddr": nsAddr, "Host": host,
		"BrokerPort": strconv.Itoa(in.broker), "FastPort": strconv.Itoa(in.fast), "HAPort": strconv.Itoa(in.ha),
		"StoreDir":      filepath.Join(home, "store"),
		"FlushDiskType": rocketmqFlushDiskType(startProfile(e, &RocketMQ{})),
		"Extra":         brokerExtra,
	}); err != nil {
		return err
	}
	return os.Chmod(conf, 0o600)
}

func (r *RocketMQ) command(java string, e *Env, heap []string, mainClass, conf, logback string) *exec.Cmd {
	return r.commandLogging(java, e, heap, mainClass, conf, logback, e.Path("rocketmq"))
}

// commandLogging is command with user.home at logHome: the JVM's logback
// logs go to logHome/logs/rocketmqlogs (the replicated stack's brokers
// each have their own).
func (r *RocketMQ) commandLogging(java string, e *Env, heap []string, mainClass, conf, logback, logHome string) *exec.Cmd {
	home := e.Path("rocketmq")
	args := append([]string{}, heap...)
	if f := r.instance().jvm; f != nil {
		args = append(args, f(e)...)
	}
	args = append(args, "-server",
		"-XX:+UseG1GC", "-XX:G1HeapRegionSize=4m", "-XX:InitiatingHeapOccupancyPercent=30",
		"-XX:SoftRefLRUPolicyMSPerMB=0", "-XX:-OmitStackTraceInFastThrow", "-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true")
	args = append(args, rocketmqJava17...)
	args = append(args,
		"-Duser.home="+logHome,
		"-Drocketmq.home.dir="+home,
		"-Drocketmq.client.logRoot="+filepath.Join(logHome, "logs", "rocketmqlogs"),
		// Both jars carry a logback config; without naming one the name
		// server picks the broker's and writes into broker.log.
		"-Drmq.logback.configurationFile="+logback,
		// The bundled configs trigger deprecation warnings, which make
		// logback dump ~200 status lines to stdout on every start.
		"-Dlogback.statusListenerClass=org.apache.rocketmq.logging.ch.qos.logback.core.status.NopStatusListener",
		// An orderly consumer holds a broker-side lock per queue. When a
		// consumer dies, the queue waits for the lock to expire: 60s by
		// default. 6s keeps the crash scenarios short; the Go driver
		// renews every second and stops handing out a queue whose lock
		// it has not renewed for 5s, inside it.
		"-Drocketmq.broker.rebalance.lockMaxLiveTime=6000",
		"-cp", classpath(filepath.Join(home, "lib")),
		mainClass, "-c", conf)
	cmd := exec.Command(java, args...)
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "ROCKETMQ_HOME="+home)
	return cmd
}

// Start launches whichever of name server and broker is not running; the
// broker only once the name server accepts connections, so that its first
// registration succeeds (the next one would be 10–30 s later).
func (r *RocketMQ) Start(ctx context.Context, e *Env) error {
	java, err := javaBinary(ctx, 17)
	if err != nil {
		return fmt.Errorf("rocketmq: %w", err)
	}
	home := e.Path("rocketmq")
	if installedVersion(home) == "" {
		return fmt.Errorf("rocketmq: %s is not installed: run the install step first (bench stack up)", filepath.Join(home, "lib"))
	}
	if err := r.writeConfig(e); err != nil {
		return fmt.Errorf("rocketmq: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(home, "store"), 0o755); err != nil {
		return err
	}
	ns := r.namesrvProc(e)
	if _, alive := ns.PID(); !alive {
		cmd := r.command(java, e, rocketmqNamesrvHeap, "org.apache.rocketmq.namesrv.NamesrvStartup", filepath.Join(home, "conf", "namesrv.properties"), "rmq.namesrv.logback.xml")
		if err := StartDetached(ns, cmd); err != nil {
			return fmt.Errorf("rocketmq: %w", err)
		}
	}
	nsAddr := r.namesrvAddr(e)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(wctx, "tcp", nsAddr)
		if err == nil {
			c.Close()
			break
		}
		if !ns.Running() {
			return fmt.Errorf("rocketmq: the name server exited during startup; read %s and %s", ns.LogFile, filepath.Join(home, "logs", "rocketmqlogs", "namesrv.log"))
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("rocketmq: the name server does not accept connections at %s: %v; read %s", nsAddr, err, ns.LogFile)
		case <-time.After(200 * time.Millisecond):
		}
	}
	br := r.brokerProc(e)
	if _, alive := br.PID(); !alive {
		cmd := r.command(java, e, rocketmqBrokerHeap, "org.apache.rocketmq.broker.BrokerStartup", filepath.Join(home, "conf", "broker.conf"), "rmq.broker.logback.xml")
		if err := StartDetached(br, cmd); err != nil {
			return fmt.Errorf("rocketmq: %w", err)
		}
	}
	return nil
}

// Ready asks the configured name servers for the cluster info
// (GET_BROKER_CLUSTER_INFO) and requires a registered broker; the version
// comes from the broker's runtime info, else the installed Maven version.
func (r *RocketMQ) Ready(ctx context.Context, e *Env) (string, error) {
	if len(e.Cfg.List(rocketmqbroker.SettingNamesrv)) == 0 {
		return "", config.Invalid(rocketmqbroker.SettingNamesrv, nil, "no name server configured")
	}
	rm, err := rocketmqbroker.NewRemoting(e.Cfg)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, ns := range e.Cfg.List(rocketmqbroker.SettingNamesrv) {
		ci, err := rm.ClusterInfo(ctx, ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		addrs := ci.BrokerAddrs()
		if len(addrs) == 0 {
			errs = append(errs, fmt.Errorf("rocketmq name server %s: no broker registered yet", ns))
			continue
		}
		// A route outlives a killed broker by up to two minutes: require a
		// registered broker that answers. An error response (e.g. ACL)
		// still proves it is up.
		answered := false
		for _, a := range addrs {
			v, err := rm.BrokerVersion(ctx, a)
			if err == nil && v != "" {
				return "RocketMQ " + v, nil
			}
			var re *rocketmqbroker.RemotingError
			if err == nil || errors.As(err, &re) {
				answered = true
			} else {
				errs = append(errs, err)
			}
		}
		if !answered {
			continue
		}
		if v := installedVersion(e.Path("rocketmq")); v != "" {
			if _, ours := r.brokerProc(e).PID(); ours {
				return "RocketMQ " + v, nil
			}
		}
		return "RocketMQ (version unknown)", nil
	}
	return "", errors.Join(errs...)
}
