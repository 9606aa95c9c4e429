package postgres

// The replicated stack's PostgreSQL: a primary and a synchronous streaming
// standby from Debian's package, each a cluster of its own under
// <stack>/replicated/pg/<node> (data, socket, log, authentication files),
// on 127.0.0.1:56432 and :56433.
//
//   - The standby is made with pg_basebackup from the primary over its
//     Unix socket, as the superuser (peer: the superuser has no password,
//     as in the plain stack), and streams from it with application_name =
//     its node name; the primary lists it in synchronous_standby_names, so
//     a COMMIT returns only once the standby has flushed its WAL
//     (synchronous_commit=on).
//   - PostgreSQL fails over to no standby on its own: the harness does
//     (Failover, called by package failover), as an operator or Patroni
//     would — it fences the lost primary (kill -9) and promotes the
//     standby, which then runs alone with synchronous_standby_names empty
//     (a primary without standby cannot wait for one; Patroni's
//     non-strict synchronous mode does the same) until StartNode brings
//     the old primary back as its standby (pg_rewind, or a fresh
//     pg_basebackup when rewinding fails) and makes it synchronous again.
//   - Clients reach whichever node is primary with one multi-host URL and
//     target_session_attrs=read-write (Endpoints): pgx tries each host and
//     keeps the one that accepts writes.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/compose"
)

// pgClusterNode is one node's name (also its application_name as a
// standby) and port.
type pgClusterNode struct {
	name string
	port int
}

var pgClusterNodes = []pgClusterNode{{"postgres-1", 56432}, {"postgres-2", 56433}}

// pgClusterURL is the application's connection string: both nodes, the
// one accepting writes.
const pgClusterURL = "postgres://" + pgAppRole + ":" + pgPassword + "@127.0.0.1:56432,127.0.0.1:56433/" + pgAppDB +
	"?sslmode=disable&target_session_attrs=read-write"

// pgFailureTimeout is the harness's failure detection for PostgreSQL: a
// primary paused this long is failed over (compose.FailureDetector).
const pgFailureTimeout = 5 * time.Second

// Cluster is the replicated stack's primary and standby.
type Cluster struct{}

// Name is "postgres".
func (*Cluster) Name() string { return "postgres" }

// ReadyTimeout implements compose.ReadyTimer.
func (*Cluster) ReadyTimeout() time.Duration { return readyTimeout }

// Packages are the plain stack's.
func (*Cluster) Packages() []compose.Package { return (&Service{}).Packages() }

// Addr is both nodes.
func (*Cluster) Addr(*compose.Env) string { return "127.0.0.1:56432,127.0.0.1:56433" }

// ReportDurability implements compose.DurabilityReporter, as the plain
// stack's (the configured URL reaches the primary).
func (*Cluster) ReportDurability(ctx context.Context, e *compose.Env) (map[string]string, error) {
	return durability(ctx, e.Cfg.PGURL)
}

// Endpoints implements compose.Endpointer: every command's postgres.url reaches
// the primary, whichever node it is.
func (*Cluster) Endpoints(*compose.Env) (map[string]string, error) {
	return map[string]string{"postgres.url": pgClusterURL}, nil
}

// DataDirs implements compose.Wiper: both nodes' clusters.
func (*Cluster) DataDirs(e *compose.Env) []string { return []string{e.Path("pg")} }

// Install checks for the binaries that make and rewind a standby too.
func (*Cluster) Install(context.Context, *compose.Env) error {
	for _, b := range []string{"initdb", "pg_basebackup", "pg_rewind", "pg_controldata"} {
		if _, err := pgBin(b); err != nil {
			return err
		}
	}
	return nil
}

func (*Cluster) dir(e *compose.Env, n pgClusterNode) string { return e.Path("pg", n.name) }

func (c *Cluster) proc(e *compose.Env, n pgClusterNode) compose.Proc {
	d := c.dir(e, n)
	return compose.Proc{Name: n.name, PIDFile: filepath.Join(d, "postgres.pid"), LogFile: filepath.Join(d, "postgres.log"),
		Match: []string{"/postgres", "-D " + filepath.Join(d, "data")}, Home: d}
}

// Procs are the nodes' postmasters.
func (c *Cluster) Procs(e *compose.Env) []compose.Proc {
	var out []compose.Proc
	for _, n := range pgClusterNodes {
		out = append(out, c.proc(e, n))
	}
	return out
}

// Logs are the nodes' server logs.
func (c *Cluster) Logs(e *compose.Env) []string {
	var out []string
	for _, n := range pgClusterNodes {
		out = append(out, c.proc(e, n).LogFile)
	}
	return out
}

// Ports implements compose.Porter: each node's SQL port.
func (*Cluster) Ports(*compose.Env) []compose.Port {
	var out []compose.Port
	for _, n := range pgClusterNodes {
		out = append(out, compose.Port{Port: n.port, What: "SQL " + n.name})
	}
	return out
}

// DurabilitySettings implements compose.DurabilityAware, as the plain
// stack's.
func (*Cluster) DurabilitySettings(profile string) string {
	return pgSynchronousCommit(profile)
}

// Nodes implements compose.Cluster.
func (c *Cluster) Nodes(e *compose.Env) []compose.Node {
	var out []compose.Node
	for _, n := range pgClusterNodes {
		out = append(out, c.nodeOf(e, n))
	}
	return out
}

func (c *Cluster) node(name string) (pgClusterNode, error) {
	for _, n := range pgClusterNodes {
		if n.name == name {
			return n, nil
		}
	}
	return pgClusterNode{}, fmt.Errorf("postgres has no node %q: its nodes are postgres-1, postgres-2", name)
}

func (c *Cluster) nodeOf(e *compose.Env, n pgClusterNode) compose.Node {
	return compose.Node{Name: n.name, Addr: "127.0.0.1:" + strconv.Itoa(n.port), Proc: c.proc(e, n)}
}

// Ready asks the node accepting writes for its version, and requires
// every other node streaming from it: a cluster with its standby down is
// not ready (up then starts the node that is missing).
func (*Cluster) Ready(ctx context.Context, e *compose.Env) (string, error) {
	conn, err := pgx.Connect(ctx, pgClusterURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var v string
	var port, streaming int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), inet_server_port(), (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming')").Scan(&v, &port, &streaming); err != nil {
		return "", err
	}
	if streaming < len(pgClusterNodes)-1 {
		return "", fmt.Errorf("the primary on %d has %d of %d standbys streaming", port, streaming, len(pgClusterNodes)-1)
	}
	return fmt.Sprintf("PostgreSQL %s, primary on %d", v, port), nil
}

// superConn connects to a node as the superuser over its socket.
func (c *Cluster) superConn(ctx context.Context, e *compose.Env, n pgClusterNode) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(cctx, c.superDSN(e, n))
}

func (c *Cluster) superDSN(e *compose.Env, n pgClusterNode) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable", filepath.Join(c.dir(e, n), "run"), n.port, pgSuperuser)
}

// inRecovery asks a running node whether it is a standby.
func (c *Cluster) inRecovery(ctx context.Context, e *compose.Env, n pgClusterNode) (bool, error) {
	conn, err := c.superConn(ctx, e, n)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var r bool
	err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r)
	return r, err
}

// exec runs statements on a node as the superuser.
func (c *Cluster) exec(ctx context.Context, e *compose.Env, n pgClusterNode, stmts ...string) error {
	conn, err := c.superConn(ctx, e, n)
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %s: %w", n.name, s, err)
		}
	}
	return nil
}

// runningPrimaries lists the running nodes that accept writes, except
// skip.
func (c *Cluster) runningPrimaries(ctx context.Context, e *compose.Env, skip string) []pgClusterNode {
	var out []pgClusterNode
	for _, n := range pgClusterNodes {
		if n.name == skip || !c.proc(e, n).Running() {
			continue
		}
		if r, err := c.inRecovery(ctx, e, n); err == nil && !r {
			out = append(out, n)
		}
	}
	return out
}

// Start starts the nodes that are not running: the primary first (the
// running node accepting writes, else the stopped one with the latest
// timeline, else a fresh cluster on postgres-1), then every other node as
// its standby, and makes the standby synchronous.
func (c *Cluster) Start(ctx context.Context, e *compose.Env) error {
	cred, err := pgOwner()
	if err != nil {
		return err
	}
	for _, n := range pgClusterNodes {
		c.nodeOf(e, n).ContinueIfStopped()
		if err := c.prepare(e, n, cred); err != nil {
			return err
		}
	}
	primary, err := c.choosePrimary(ctx, e)
	if err != nil {
		return err
	}
	if !c.proc(e, primary).Running() {
		if err := c.startServer(ctx, e, primary, cred); err != nil {
			return err
		}
	}
	// The primary may still name a synchronous standby that is not
	// running (stopped with the stack): every commit, provisioning's
	// first, would wait for it forever. Name only the running ones until
	// the others joined.
	if err := c.setSync(ctx, e, primary); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := (&Service{}).provision(pctx, filepath.Join(c.dir(e, primary), "run"), c.proc(e, primary), c.instance(primary)); err != nil {
		return err
	}
	for _, n := range pgClusterNodes {
		if n != primary {
			if err := c.joinAsStandby(ctx, e, n, primary, cred); err != nil {
				return err
			}
		}
	}
	return c.setSync(ctx, e, primary)
}

// prepare makes a node's directories and authentication files, owned by
// the server's user.
func (c *Cluster) prepare(e *compose.Env, n pgClusterNode, cred *syscall.Credential) error {
	d := c.dir(e, n)
	if err := os.MkdirAll(filepath.Join(d, "run"), 0o755); err != nil {
		return err
	}
	if err := writePGAuth(d, cred, c.instance(n).tcp); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	// The standby's pg_basebackup and pg_rewind connect as the superuser
	// over the primary's socket, by peer.
	hba, err := os.OpenFile(filepath.Join(d, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = hba.WriteString("local  replication  " + pgSuperuser + "  peer  map=stack\n")
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := chownTree(d, cred); err != nil {
		return fmt.Errorf("%s: give %s to the postgres user: %w", n.name, d, err)
	}
	return nil
}

func (c *Cluster) hasData(e *compose.Env, n pgClusterNode) bool {
	_, err := os.Stat(filepath.Join(c.dir(e, n), "data", "PG_VERSION"))
	return err == nil
}

func (c *Cluster) isStandbyData(e *compose.Env, n pgClusterNode) bool {
	_, err := os.Stat(filepath.Join(c.dir(e, n), "data", "standby.signal"))
	return err == nil
}

// choosePrimary finds the node to run as primary, initialising
// postgres-1 when no node has data. Two running primaries are an error
// the user resolves (it never happens through the stack's own faults:
// Failover fences the old primary before it promotes).
func (c *Cluster) choosePrimary(ctx context.Context, e *compose.Env) (pgClusterNode, error) {
	switch running := c.runningPrimaries(ctx, e, ""); len(running) {
	case 1:
		return running[0], nil
	case 2:
		return pgClusterNode{}, fmt.Errorf("postgres: both nodes run as primary: stop one with 'bench stack down --topology replicated postgres' and wipe its data directory")
	}
	best, bestTL := -1, -1
	for i, n := range pgClusterNodes {
		if !c.hasData(e, n) || c.isStandbyData(e, n) {
			continue
		}
		if tl := c.timeline(ctx, e, n); tl > bestTL {
			best, bestTL = i, tl
		}
	}
	if best >= 0 {
		return pgClusterNodes[best], nil
	}
	for _, n := range pgClusterNodes {
		if c.hasData(e, n) {
			// Only standbys have data (a primary's directory was wiped):
			// promote one at start.
			if err := os.Remove(filepath.Join(c.dir(e, n), "data", "standby.signal")); err != nil {
				return pgClusterNode{}, err
			}
			return n, nil
		}
	}
	return pgClusterNodes[0], c.initdb(ctx, e, pgClusterNodes[0])
}

// timeline reads a stopped node's latest checkpoint timeline
// (pg_controldata); -1 when it cannot.
func (c *Cluster) timeline(ctx context.Context, e *compose.Env, n pgClusterNode) int {
	bin, err := pgBin("pg_controldata")
	if err != nil {
		return -1
	}
	out, err := exec.CommandContext(ctx, bin, filepath.Join(c.dir(e, n), "data")).Output()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "Latest checkpoint's TimeLineID" {
			tl, _ := strconv.Atoi(strings.TrimSpace(v))
			return tl
		}
	}
	return -1
}

func (c *Cluster) initdb(ctx context.Context, e *compose.Env, n pgClusterNode) error {
	cred, err := pgOwner()
	if err != nil {
		return err
	}
	if err := initCluster(ctx, filepath.Join(c.dir(e, n), "data"), c.proc(e, n).LogFile, cred); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

// startServer starts a node's server and waits until it accepts
// connections on its socket (a standby too: hot_standby).
func (c *Cluster) startServer(ctx context.Context, e *compose.Env, n pgClusterNode, cred *syscall.Credential) error {
	server, err := pgBin("postgres")
	if err != nil {
		return err
	}
	// Two servers and three JVMs (or Erlang VMs) share the machine: 128 MB
	// of shared buffers each. wal_log_hints lets pg_rewind bring a failed
	// primary back as a standby; wal_keep_size keeps the WAL a standby
	// stopped for a while needs to catch up, without a slot that could
	// fill the disk.
	cmd := asOwner(exec.Command(server, serverArgs(c.dir(e, n), n.port, compose.StartProfile(e, c),
		"shared_buffers=128MB", "hot_standby=on", "max_wal_senders=10", "wal_log_hints=on", "wal_keep_size=512MB",
		"wal_receiver_status_interval=1s")...), cred)
	p := c.proc(e, n)
	if err := compose.StartDetached(p, cmd); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		conn, err := c.superConn(ctx, e, n)
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if !p.Running() {
			return fmt.Errorf("%s: the server exited during startup (read %s): %w", n.name, p.LogFile, err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: no connection on its socket within 90s: %w", n.name, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// instance is what provisioning and the authentication rules need of a
// node: the plain stack's application role, password and TCP rules.
func (*Cluster) instance(n pgClusterNode) pgInstance {
	return pgInstance{port: n.port, password: pgPassword,
		tcp: "host   all  all  127.0.0.1/32  scram-sha-256\n" +
			"host   all  all  ::1/128       scram-sha-256\n"}
}

// Stop stops the standbys first, then the primary (fast shutdown: SIGINT).
func (c *Cluster) Stop(ctx context.Context, e *compose.Env) error {
	var errs []error
	for i := len(pgClusterNodes) - 1; i >= 0; i-- {
		errs = append(errs, c.stopNode(ctx, e, pgClusterNodes[i]))
	}
	return errors.Join(errs...)
}

func (c *Cluster) stopNode(ctx context.Context, e *compose.Env, n pgClusterNode) error {
	p := c.proc(e, n)
	if pid, ok := p.PID(); ok {
		_ = syscall.Kill(pid, syscall.SIGINT)
	}
	return p.Kill(ctx, 60*time.Second)
}

// StopNode implements compose.NodeStopper: a fast shutdown (SIGINT; SIGTERM would
// wait for every client to disconnect).
func (c *Cluster) StopNode(ctx context.Context, e *compose.Env, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	return c.stopNode(ctx, e, n)
}

// FailureTimeout implements compose.FailureDetector: the harness's own.
func (*Cluster) FailureTimeout() time.Duration { return pgFailureTimeout }
