// Package rocketmq is the local stack's Apache RocketMQ 5, run on the JVM
// from Maven Central artifacts: the plain stack's name server and broker
// (Service), the replicated stack's broker group in controller mode
// (Cluster) and the secure stack's, with TLS and ACLs (Secure). It
// registers them as "rocketmq" (package compose says how services work).
package rocketmq

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
	"embed"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rocketmqbroker "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

const (
	// Version is the RocketMQ release the native stack runs.
	Version = "5.3.3"
	// BrokerAddr is the broker's remoting address in the native
	// stack (clients learn it from the name server's routes).
	BrokerAddr = "127.0.0.1:50911"
	// ClusterName is the cluster name of the native broker.
	ClusterName = "DefaultCluster"
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

// Service is the native name server + broker of the local stack.
type Service struct {
	// inst is what this service runs; nil: the plain stack's
	// (plainRocketMQ). The secure variant's is in secure.go.
	inst *rocketmqInstance
}

// rocketmqInstance is what differs between the stacks' RocketMQs.
type rocketmqInstance struct {
	namesrv                 string // when the configuration names none on loopback
	broker, fast, ha        int    // the broker's ports (fast = broker-2, HA = broker+1)
	what                    string // how status names the remoting ports
	jvm                     func(e *compose.Env) []string
	namesrvConf, brokerConf func(e *compose.Env) (string, error) // appended to the rendered files
}

var plainRocketMQ = &rocketmqInstance{namesrv: rocketmqbroker.DefaultNamesrv, broker: 50911, fast: 50909, ha: 50912, what: ""}

func (r *Service) instance() *rocketmqInstance {
	if r.inst == nil {
		return plainRocketMQ
	}
	return r.inst
}

// javaRuntime is RocketMQ's classpath, in every variant's stack.
var javaRuntime = compose.JavaRuntime{Name: "rocketmq", Version: Version, Dir: "rocketmq", Deps: []string{
	"org.apache.rocketmq:rocketmq-broker:" + Version,
	"org.apache.rocketmq:rocketmq-namesrv:" + Version,
}}

// The configuration templates of the servers (compose.RenderTemplate).
//
//go:embed templates/*
var templates embed.FS

// writeTemplate renders the template name into path.
func writeTemplate(path, name string, vars map[string]string) error {
	return compose.WriteTemplate(templates, path, "templates/"+name, vars)
}

func init() {
	compose.Register("rocketmq", 4, compose.Variants{
		compose.VariantPlain:      func() compose.Service { return &Service{} },
		compose.VariantReplicated: func() compose.Service { return &Cluster{} },
		compose.VariantSecure:     func() compose.Service { return newSecure() },
	})
}

// Name is "rocketmq".
func (*Service) Name() string { return "rocketmq" }

// Packages are Java and Maven.
func (*Service) Packages() []compose.Package { return compose.JavaPackages() }

// DataDirs implements compose.Wiper: the store, the logs and the name
// server's state.
func (*Service) DataDirs(e *compose.Env) []string {
	return []string{e.Path("rocketmq", "store"), e.Path("rocketmq", "logs"), e.Path("rocketmq", "namesrv")}
}

// Addr is the configured name servers.
func (*Service) Addr(e *compose.Env) string {
	return strings.Join(e.Cfg.List(rocketmqbroker.SettingNamesrv), ",")
}

// Install fetches RocketMQ's classpath (javaRuntime).
func (*Service) Install(ctx context.Context, e *compose.Env) error {
	return javaRuntime.Install(ctx, e)
}

// namesrvProc is the name server of any stack.
func namesrvProc(e *compose.Env) compose.Proc {
	return compose.Proc{Name: "rocketmq-namesrv", PIDFile: e.Path("run", "rocketmq-namesrv.pid"), LogFile: e.Path("logs", "rocketmq-namesrv.log"),
		Match: []string{"org.apache.rocketmq.namesrv.NamesrvStartup"}, Home: e.Path("rocketmq")}
}

func (*Service) brokerProc(e *compose.Env) compose.Proc {
	return compose.Proc{Name: "rocketmq-broker", PIDFile: e.Path("run", "rocketmq-broker.pid"), LogFile: e.Path("logs", "rocketmq-broker.log"),
		Match: []string{"org.apache.rocketmq.broker.BrokerStartup"}, Home: e.Path("rocketmq")}
}

// Procs lists the broker first so that stopping in order stops the broker
// before the name server it unregisters from.
func (r *Service) Procs(e *compose.Env) []compose.Proc {
	return []compose.Proc{r.brokerProc(e), namesrvProc(e)}
}

// HAExposure is why the broker's HA port listens on every
// interface, and what guards it (docs/stack.md, "Loopback only").
const HAExposure = "RocketMQ 5.3.3 has no bind setting for its HA port; firewall it (docs/stack.md, Loopback only)"

// Ports implements compose.Porter: the name server, the broker's remoting port and
// fast port, and its HA port, which RocketMQ binds to every interface.
func (r *Service) Ports(e *compose.Env) []compose.Port {
	in := r.instance()
	_, ns, _ := net.SplitHostPort(r.namesrvAddr(e))
	nsPort, _ := strconv.Atoi(ns)
	return []compose.Port{{Port: nsPort, What: "name server" + in.what}, {Port: in.broker, What: "broker" + in.what}, {Port: in.fast, What: "broker fast port" + in.what},
		{Port: in.ha, What: "broker HA", AllInterfaces: HAExposure}}
}

// Logs are each JVM's output and its own log.
func (r *Service) Logs(e *compose.Env) []string {
	logs := e.Path("rocketmq", "logs", "rocketmqlogs")
	return []string{
		namesrvProc(e).LogFile, filepath.Join(logs, "namesrv.log"),
		r.brokerProc(e).LogFile, filepath.Join(logs, "broker.log"), filepath.Join(logs, "broker_default.log"),
	}
}

// namesrvAddr is the address the native name server binds: the first
// configured name server when it is a loopback address, else the
// instance's.
func (r *Service) namesrvAddr(e *compose.Env) string {
	return compose.LoopbackOr(e.Cfg.List(rocketmqbroker.SettingNamesrv), r.instance().namesrv)
}

// DurabilitySettings implements compose.DurabilityAware: the fsync
// profile sets flushDiskType=SYNC_FLUSH.
func (*Service) DurabilitySettings(profile string) string { return rocketmqFlushDiskType(profile) }

func rocketmqFlushDiskType(profile string) string {
	if profile == compose.DurabilityFsync {
		return "SYNC_FLUSH"
	}
	return "ASYNC_FLUSH"
}

// writeConfig renders the name server's and the broker's configuration.
func (r *Service) writeConfig(e *compose.Env) error {
	in := r.instance()
	home := e.Path("rocketmq")
	nsAddr := r.namesrvAddr(e)
	_, nsPort, _ := net.SplitHostPort(nsAddr)
	host, _, _ := net.SplitHostPort(BrokerAddr)
	extra := func(f func(*compose.Env) (string, error)) (string, error) {
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
		"FlushDiskType": rocketmqFlushDiskType(compose.StartProfile(e, &Service{})),
		"Extra":         brokerExtra,
	}); err != nil {
		return err
	}
	return os.Chmod(conf, 0o600)
}

// server is one JVM of RocketMQ: its main class, heap, configuration
// file and logback configuration, and the user.home its logback logs go
// under (logHome/logs/rocketmqlogs; the replicated stack's brokers each
// have their own).
type server struct {
	main, conf, logback, logHome string
	heap                         []string
}

// namesrvServer is the name server of any stack.
func namesrvServer(e *compose.Env) server {
	home := e.Path("rocketmq")
	return server{main: "org.apache.rocketmq.namesrv.NamesrvStartup", conf: filepath.Join(home, "conf", "namesrv.properties"),
		logback: "rmq.namesrv.logback.xml", logHome: home, heap: rocketmqNamesrvHeap}
}

// jvm is s as this service's instance runs it (the secure one with TLS).
func (r *Service) jvm(e *compose.Env, s server) compose.JVM {
	home := e.Path("rocketmq")
	opts := append([]string{}, s.heap...)
	if f := r.instance().jvm; f != nil {
		opts = append(opts, f(e)...)
	}
	opts = append(opts, "-server",
		"-XX:+UseG1GC", "-XX:G1HeapRegionSize=4m", "-XX:InitiatingHeapOccupancyPercent=30",
		"-XX:SoftRefLRUPolicyMSPerMB=0", "-XX:-OmitStackTraceInFastThrow", "-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true")
	opts = append(opts, rocketmqJava17...)
	opts = append(opts,
		"-Duser.home="+s.logHome,
		"-Drocketmq.home.dir="+home,
		"-Drocketmq.client.logRoot="+filepath.Join(s.logHome, "logs", "rocketmqlogs"),
		// Both jars carry a logback config; without naming one the name
		// server picks the broker's and writes into broker.log.
		"-Drmq.logback.configurationFile="+s.logback,
		// The bundled configs trigger deprecation warnings, which make
		// logback dump ~200 status lines to stdout on every start.
		"-Dlogback.statusListenerClass=org.apache.rocketmq.logging.ch.qos.logback.core.status.NopStatusListener",
		// An orderly consumer holds a broker-side lock per queue. When a
		// consumer dies, the queue waits for the lock to expire: 60s by
		// default. 6s keeps the crash scenarios short; the Go driver
		// renews every second and stops handing out a queue whose lock
		// it has not renewed for 5s, inside it.
		"-Drocketmq.broker.rebalance.lockMaxLiveTime=6000")
	return compose.JVM{Options: opts, Main: s.main, Args: []string{"-c", s.conf}, Env: []string{"ROCKETMQ_HOME=" + home}}
}

// startNamesrv starts the name server unless it runs.
func (r *Service) startNamesrv(java *compose.Launcher, e *compose.Env) error {
	if _, alive := namesrvProc(e).PID(); alive {
		return nil
	}
	return java.Start(namesrvProc(e), r.jvm(e, namesrvServer(e)))
}

// Start launches whichever of name server and broker is not running; the
// broker only once the name server accepts connections, so that its first
// registration succeeds (the next one would be 10–30 s later).
func (r *Service) Start(ctx context.Context, e *compose.Env) error {
	java, err := javaRuntime.Launcher(ctx, e, r.writeConfig)
	if err != nil {
		return err
	}
	home := e.Path("rocketmq")
	if err := os.MkdirAll(filepath.Join(home, "store"), 0o755); err != nil {
		return err
	}
	if err := r.startNamesrv(java, e); err != nil {
		return err
	}
	if err := compose.WaitListening(ctx, r.namesrvAddr(e), namesrvProc(e), 60*time.Second); err != nil {
		return fmt.Errorf("rocketmq: the name server: %w (its own log: %s)", err, filepath.Join(home, "logs", "rocketmqlogs", "namesrv.log"))
	}
	br := r.brokerProc(e)
	if _, alive := br.PID(); alive {
		return nil
	}
	return java.Start(br, r.jvm(e, server{main: "org.apache.rocketmq.broker.BrokerStartup", conf: filepath.Join(home, "conf", "broker.conf"),
		logback: "rmq.broker.logback.xml", logHome: home, heap: rocketmqBrokerHeap}))
}

// Ready asks the configured name servers for the cluster info
// (GET_BROKER_CLUSTER_INFO) and requires a registered broker; the version
// comes from the broker's runtime info, else the installed Maven version.
func (r *Service) Ready(ctx context.Context, e *compose.Env) (string, error) {
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
		if v := javaRuntime.InstalledVersion(e); v != "" {
			if _, ours := r.brokerProc(e).PID(); ours {
				return "RocketMQ " + v, nil
			}
		}
		return "RocketMQ (version unknown)", nil
	}
	return "", errors.Join(errs...)
}
