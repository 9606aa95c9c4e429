package postgres

// The replicated PostgreSQL's roles: a node joining as standby, the
// synchronous standby setting, the harness's failover, and what the
// failover faults and `bench stack status` ask of the nodes.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/inboxbench/inboxbench/compose"
)

// joinAsStandby makes n a streaming standby of primary: started as it is
// when it already is a standby, rewound (pg_rewind) or copied afresh
// (pg_basebackup) when it was a primary or has no data, and waits until
// it streams.
func (c *Cluster) joinAsStandby(ctx context.Context, e *compose.Env, n, primary pgClusterNode, cred *syscall.Credential) error {
	if c.proc(e, n).Running() {
		r, err := c.inRecovery(ctx, e, n)
		switch {
		case err != nil:
			return fmt.Errorf("%s: running but not answering: %w", n.name, err)
		case !r:
			return fmt.Errorf("postgres: %s and %s both run as primary: stop %s with kill and let 'bench stack up --topology replicated' rebuild it", n.name, primary.name, n.name)
		}
		return c.waitStreaming(ctx, e, n, primary)
	}
	data := filepath.Join(c.dir(e, n), "data")
	switch {
	case !c.hasData(e, n):
		if err := c.basebackup(ctx, e, n, primary, cred); err != nil {
			return err
		}
	case !c.isStandbyData(e, n):
		// A former primary: its history may have diverged from the
		// primary's since the failover. Rewind it onto the primary's
		// timeline, or copy it afresh when rewinding fails.
		if err := c.rewind(ctx, e, n, primary, cred); err != nil {
			fmt.Fprintf(e.Out, "%-9s pg_rewind failed (%v): copying it afresh with pg_basebackup\n", n.name, err)
			if err := os.RemoveAll(data); err != nil {
				return err
			}
			if err := c.basebackup(ctx, e, n, primary, cred); err != nil {
				return err
			}
		}
	}
	if err := c.configureStandby(e, n, primary, cred); err != nil {
		return err
	}
	if err := c.startServer(ctx, e, n, cred); err != nil {
		return err
	}
	return c.waitStreaming(ctx, e, n, primary)
}

// basebackup copies primary into n's empty data directory.
func (c *Cluster) basebackup(ctx context.Context, e *compose.Env, n, primary pgClusterNode, cred *syscall.Credential) error {
	bin, err := pgBin("pg_basebackup")
	if err != nil {
		return err
	}
	cmd := asOwner(exec.CommandContext(ctx, bin, "-D", filepath.Join(c.dir(e, n), "data"), "-d", c.superDSN(e, primary),
		"-X", "stream", "-c", "fast", "--no-password"), cred)
	if err := compose.RunLogged(ctx, c.proc(e, n).LogFile, cmd); err != nil {
		return fmt.Errorf("%s: copy %s: %w", n.name, primary.name, err)
	}
	return nil
}

// rewind brings a stopped former primary onto primary's timeline.
func (c *Cluster) rewind(ctx context.Context, e *compose.Env, n, primary pgClusterNode, cred *syscall.Credential) error {
	bin, err := pgBin("pg_rewind")
	if err != nil {
		return err
	}
	cmd := asOwner(exec.CommandContext(ctx, bin, "-D", filepath.Join(c.dir(e, n), "data"),
		"--source-server="+c.superDSN(e, primary)), cred)
	cmd.Dir = c.dir(e, n) // pg_rewind's single-user recovery writes its log in the working directory
	return compose.RunLogged(ctx, c.proc(e, n).LogFile, cmd)
}

// configureStandby marks n's stopped cluster a standby of primary:
// standby.signal, primary_conninfo with n's name as application_name, and
// no synchronous standby of its own (what it copied from the primary
// named n itself).
func (c *Cluster) configureStandby(e *compose.Env, n, primary pgClusterNode, cred *syscall.Credential) error {
	data := filepath.Join(c.dir(e, n), "data")
	if err := os.WriteFile(filepath.Join(data, "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	if err := setAutoConf(data, map[string]string{"primary_conninfo": c.conninfo(e, n, primary), "synchronous_standby_names": ""}); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return chownTree(data, cred)
}

// conninfo is how standby n reaches primary.
func (c *Cluster) conninfo(e *compose.Env, n, primary pgClusterNode) string {
	return fmt.Sprintf("host=%s port=%d user=%s application_name=%s", filepath.Join(c.dir(e, primary), "run"), primary.port, pgSuperuser, n.name)
}

// setAutoConf sets keys in a stopped cluster's postgresql.auto.conf (what
// ALTER SYSTEM writes), keeping its other lines.
func setAutoConf(data string, set map[string]string) error {
	path := filepath.Join(data, "postgresql.auto.conf")
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		k, _, _ := strings.Cut(line, "=")
		if _, replaced := set[strings.TrimSpace(k)]; replaced {
			continue
		}
		out = append(out, line)
	}
	for _, k := range sortedKeys(boolKeys(set)) {
		out = append(out, fmt.Sprintf("%s = '%s'", k, strings.ReplaceAll(set[k], "'", "''")))
	}
	return os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o600)
}

func boolKeys(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// waitStreaming waits until primary lists n as a standby that streams.
func (c *Cluster) waitStreaming(ctx context.Context, e *compose.Env, n, primary pgClusterNode) error {
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		last = func() error {
			conn, err := c.superConn(ctx, e, primary)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			var state string
			if err := conn.QueryRow(ctx, "SELECT state FROM pg_stat_replication WHERE application_name = $1", n.name).Scan(&state); err != nil {
				return fmt.Errorf("not connected to %s yet: %w", primary.name, err)
			}
			if state != "streaming" {
				return fmt.Errorf("%s on %s", state, primary.name)
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s does not stream from %s: %v (read %s)", n.name, primary.name, last, c.proc(e, n).LogFile)
}

// asyncFile marks the weak setting applied: while it exists the primary
// lists no synchronous standby (WeakSetting).
func (*Cluster) asyncFile(e *compose.Env) string { return e.Path("run", "postgres.async") }

// setSync lists primary's running standbys in its
// synchronous_standby_names (none while the weak setting is applied, or
// when no standby runs), so that a COMMIT waits for them.
func (c *Cluster) setSync(ctx context.Context, e *compose.Env, primary pgClusterNode) error {
	var names []string
	if _, err := os.Stat(c.asyncFile(e)); errors.Is(err, os.ErrNotExist) {
		for _, n := range pgClusterNodes {
			if n != primary && c.proc(e, n).Running() {
				names = append(names, `"`+n.name+`"`)
			}
		}
	}
	return c.exec(ctx, e, primary, fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '%s'", strings.Join(names, ",")), "SELECT pg_reload_conf()")
}

// Leaders implements compose.Cluster: the primary, whatever resource names (the
// whole database fails over).
func (c *Cluster) Leaders(ctx context.Context, e *compose.Env, _ string) ([]compose.Node, error) {
	ps := c.runningPrimaries(ctx, e, "")
	if len(ps) == 0 {
		return nil, errors.New("postgres: no node runs as primary")
	}
	var out []compose.Node
	for _, p := range ps {
		out = append(out, c.nodeOf(e, p))
	}
	return out, nil
}

// Failover implements compose.Promoter: fence lost (kill -9 of its process group,
// so a paused primary never runs again), promote the standby, and let it
// run alone (no synchronous standby to wait for) until StartNode brings
// lost back as its standby.
func (c *Cluster) Failover(ctx context.Context, e *compose.Env, lost compose.Node) (compose.Node, error) {
	if lost.Proc.Running() {
		if err := lost.Signal(syscall.SIGKILL); err != nil {
			return compose.Node{}, fmt.Errorf("fence %s: %w", lost.Name, err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); lost.Proc.Running(); {
		if time.Now().After(deadline) {
			return compose.Node{}, fmt.Errorf("fence %s: still running 10s after kill -9", lost.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, n := range pgClusterNodes {
		if n.name == lost.Name || !c.proc(e, n).Running() {
			continue
		}
		if r, err := c.inRecovery(ctx, e, n); err != nil || !r {
			continue
		}
		if err := c.exec(ctx, e, n, "SELECT pg_promote(true, 60)",
			"ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()"); err != nil {
			return compose.Node{}, fmt.Errorf("promote %s: %w", n.name, err)
		}
		return c.nodeOf(e, n), nil
	}
	return compose.Node{}, fmt.Errorf("postgres: no running standby to promote after losing %s", lost.Name)
}

// StartNode implements compose.Cluster: the node is started as the standby of the
// running primary (rewound or copied afresh when it was the primary
// before a failover), which then waits for it again (synchronous); with
// no other primary running it is started as it is (a primary restarted
// in a rolling restart stays primary). It returns once the node streams,
// or accepts writes.
func (c *Cluster) StartNode(ctx context.Context, e *compose.Env, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	cred, err := pgOwner()
	if err != nil {
		return err
	}
	c.nodeOf(e, n).ContinueIfStopped()
	if err := c.prepare(e, n, cred); err != nil {
		return err
	}
	others := c.runningPrimaries(ctx, e, n.name)
	if len(others) == 0 {
		if !c.proc(e, n).Running() {
			if err := c.startServer(ctx, e, n, cred); err != nil {
				return err
			}
		}
		if r, err := c.inRecovery(ctx, e, n); err != nil || r {
			return err // a standby whose primary is down: it streams once the primary is back
		}
		return c.setSync(ctx, e, n)
	}
	primary := others[0]
	if err := c.joinAsStandby(ctx, e, n, primary, cred); err != nil {
		return err
	}
	return c.setSync(ctx, e, primary)
}

// NodeStatus implements compose.Cluster: each node's role as the node says
// (pg_is_in_recovery), with what it streams.
func (c *Cluster) NodeStatus(ctx context.Context, e *compose.Env) []compose.NodeStatus {
	var out []compose.NodeStatus
	for _, n := range pgClusterNodes {
		s := compose.NodeStatus{Node: c.nodeOf(e, n)}
		pid, alive := s.Proc.PID()
		if !alive {
			s.Detail = "not running"
			out = append(out, s)
			continue
		}
		s.Role, s.Detail, s.Healthy = c.describe(ctx, e, n)
		s.Detail = fmt.Sprintf("pid %d, %s", pid, s.Detail)
		out = append(out, s)
	}
	return out
}

// describe asks a running node for its role and replication.
func (c *Cluster) describe(ctx context.Context, e *compose.Env, n pgClusterNode) (role, detail string, healthy bool) {
	conn, err := c.superConn(ctx, e, n)
	if err != nil {
		return "", err.Error(), false
	}
	defer conn.Close(context.Background())
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		return "", err.Error(), false
	}
	if standby {
		var status, sender string
		err := conn.QueryRow(ctx, "SELECT status, coalesce(sender_host, '') || ':' || coalesce(sender_port::text, '') FROM pg_stat_wal_receiver").Scan(&status, &sender)
		if err != nil {
			return "standby", "receiving no WAL", true
		}
		from := strings.TrimSuffix(sender, ":")
		for _, p := range pgClusterNodes {
			if strings.HasPrefix(from, filepath.Join(c.dir(e, p), "run")+":") {
				from = p.name
			}
		}
		return "standby", status + " from " + from, true
	}
	var sync string
	_ = conn.QueryRow(ctx, "SELECT current_setting('synchronous_standby_names')").Scan(&sync)
	rows, err := conn.Query(ctx, "SELECT application_name, state, sync_state FROM pg_stat_replication ORDER BY application_name")
	if err != nil {
		return "primary", err.Error(), true
	}
	var parts []string
	for rows.Next() {
		var app, state, syncState string
		if rows.Scan(&app, &state, &syncState) == nil {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", app, state, syncState))
		}
	}
	rows.Close()
	if len(parts) == 0 {
		parts = []string{"no standby"}
	}
	if sync == "" {
		sync = "none: commits wait for no standby"
	}
	return "primary", "standbys: " + strings.Join(parts, ", ") + "; synchronous_standby_names " + sync, true
}

// Detach implements compose.Lagger: every standby's WAL receiver is stopped
// (primary_conninfo emptied and reloaded), so it receives nothing of what
// the primary commits from now on; resume points it at leader again.
func (c *Cluster) Detach(ctx context.Context, e *compose.Env, leader compose.Node) (func(context.Context) error, error) {
	primary, err := c.node(leader.Name)
	if err != nil {
		return nil, err
	}
	var detached []pgClusterNode
	resume := func(ctx context.Context) error {
		var errs []error
		for _, n := range detached {
			if !c.proc(e, n).Running() {
				continue
			}
			errs = append(errs, c.exec(ctx, e, n, fmt.Sprintf("ALTER SYSTEM SET primary_conninfo = '%s'", c.conninfo(e, n, primary)), "SELECT pg_reload_conf()"))
		}
		return errors.Join(errs...)
	}
	for _, n := range pgClusterNodes {
		if n == primary || !c.proc(e, n).Running() {
			continue
		}
		if err := c.exec(ctx, e, n, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"); err != nil {
			return resume, err
		}
		detached = append(detached, n)
		if err := c.waitNoReceiver(ctx, e, n); err != nil {
			return resume, err
		}
	}
	return resume, nil
}

// waitNoReceiver waits until n's WAL receiver has stopped.
func (c *Cluster) waitNoReceiver(ctx context.Context, e *compose.Env, n pgClusterNode) error {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		conn, err := c.superConn(ctx, e, n)
		if err != nil {
			return err
		}
		var receivers int
		err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&receivers)
		conn.Close(context.Background())
		if err == nil && receivers == 0 {
			return nil
		}
	}
	return fmt.Errorf("%s: its WAL receiver still runs 15s after primary_conninfo was emptied", n.name)
}

// WeakSetting implements compose.Weakener: asynchronous replication, the primary
// waiting for no standby before a COMMIT returns.
func (c *Cluster) WeakSetting() compose.Weakness {
	return compose.Weakness{Name: "asynchronous replication (synchronous_standby_names empty: a COMMIT returns before the standby has its WAL)",
		Apply: func(ctx context.Context, e *compose.Env) (func(context.Context) error, error) {
			restore := func(ctx context.Context) error {
				if err := compose.RemoveIfExists(c.asyncFile(e)); err != nil {
					return err
				}
				if ps := c.runningPrimaries(ctx, e, ""); len(ps) == 1 {
					return c.setSync(ctx, e, ps[0])
				}
				return nil
			}
			if err := os.MkdirAll(e.Path("run"), 0o755); err != nil {
				return restore, err
			}
			if err := os.WriteFile(c.asyncFile(e), []byte("asynchronous replication: the failover control's weak setting\n"), 0o644); err != nil {
				return restore, err
			}
			ps := c.runningPrimaries(ctx, e, "")
			if len(ps) != 1 {
				return restore, errors.New("postgres: no single primary runs")
			}
			return restore, c.setSync(ctx, e, ps[0])
		}}
}
