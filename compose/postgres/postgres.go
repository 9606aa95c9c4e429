// Package postgres is the local stack's PostgreSQL: the plain stack's
// server (Service), the replicated stack's primary and synchronous
// standby (Cluster, with the harness's failover) and the secure stack's
// server over TLS (Secure), all from Debian's package, each a cluster of
// its own under the stack directory. It registers them as "postgres"
// (package compose says how services work).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

// Service runs a PostgreSQL cluster from Debian's package, initialised in
// the stack directory. initdb refuses to run as root, so when bench runs as
// root the cluster belongs to the `postgres` system user the package creates.
type Service struct{}

// Local-stack PostgreSQL settings. The application role is deliberately not
// a superuser, as in the article's lab: what the benchmark does must work
// with the rights a production service account has. pg_monitor lets it read
// pg_stat_activity and pg_stat_statements for the contention sampler.
const (
	pgPort      = 55432
	pgSuperuser = "postgres"
	pgAppRole   = "inboxbench"
	pgAppDB     = "inboxbench"
	pgPassword  = "inboxbench" // the application role's, as in the documented URL
)

func init() {
	compose.Register("postgres", 1, compose.Variants{
		compose.VariantPlain:      func() compose.Service { return &Service{} },
		compose.VariantReplicated: func() compose.Service { return &Cluster{} },
		compose.VariantSecure:     func() compose.Service { return &Secure{} },
	})
}

// readyTimeout bounds how long up waits for a server: PostgreSQL starts
// in seconds, even after a crash's recovery of the stack's small WAL.
const readyTimeout = 90 * time.Second

// Name is "postgres".
func (*Service) Name() string { return "postgres" }

// ReadyTimeout implements compose.ReadyTimer.
func (*Service) ReadyTimeout() time.Duration { return readyTimeout }

// Addr is the host and port of the configured URL.
func (*Service) Addr(e *compose.Env) string {
	c, err := pgx.ParseConfig(e.Cfg.PGURL)
	if err != nil {
		return config.Redact(e.Cfg.PGURL)
	}
	return fmt.Sprintf("%s:%d", c.Host, c.Port)
}

// Packages are the server and its contrib modules (pg_stat_statements).
func (*Service) Packages() []compose.Package {
	return []compose.Package{{Deb: "postgresql", Found: func() bool { _, err := pgBin("pg_ctl"); return err == nil }},
		// pg_stat_statements ships in contrib; on Debian 12 it is part of postgresql-NN.
		{Deb: "postgresql-contrib", Found: func() bool { return pgContribFound() }}}
}

// Procs is the postmaster.
func (p *Service) Procs(e *compose.Env) []compose.Proc {
	return []compose.Proc{{Name: "postgres", PIDFile: e.Path("pg", "postgres.pid"), LogFile: e.Path("pg", "postgres.log"),
		Match: []string{"/postgres", "-D " + e.Path("pg", "data")}, Home: e.Path("pg")}}
}

// Logs is the server's log.
func (p *Service) Logs(e *compose.Env) []string { return []string{e.Path("pg", "postgres.log")} }

// Ports implements compose.Porter: SQL.
func (*Service) Ports(e *compose.Env) []compose.Port {
	return []compose.Port{{Port: pgListenPort(e, pgPort), What: "SQL"}}
}

// DataDirs implements compose.Wiper: the whole cluster.
func (p *Service) DataDirs(e *compose.Env) []string { return []string{e.Path("pg")} }

// Install checks for the Debian package's binaries (Packages installs it).
func (*Service) Install(ctx context.Context, e *compose.Env) error {
	_, err := pgBin("initdb")
	return err
}

// pgBin finds a PostgreSQL server binary; Debian keeps them out of PATH
// under /usr/lib/postgresql/<major>/bin. The newest major wins.
func pgBin(name string) (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if p := filepath.Join(d, name); compose.IsExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("postgres: %s not found under /usr/lib/postgresql/*/bin or in PATH: install the Debian package postgresql", name)
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func pgContribFound() bool {
	m, _ := filepath.Glob("/usr/share/postgresql/*/extension/pg_stat_statements.control")
	return len(m) > 0
}

// pgOwner returns the credentials the server must run as: the caller, or
// the postgres system user when the caller is root.
func pgOwner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres: running as root, but there is no `postgres` user to own the cluster (initdb refuses root): install the Debian package postgresql, which creates it")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func asOwner(cmd *exec.Cmd, cred *syscall.Credential) *exec.Cmd {
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return cmd
}

func chownTree(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

// DurabilitySettings implements compose.DurabilityAware: the os profile
// sets synchronous_commit=off.
func (*Service) DurabilitySettings(profile string) string { return pgSynchronousCommit(profile) }

func pgSynchronousCommit(profile string) string {
	if profile == compose.DurabilityOS {
		return "off"
	}
	return "on"
}

// Start initialises the cluster on its first start, starts the server and
// provisions the application role and database.
func (p *Service) Start(ctx context.Context, e *compose.Env) error {
	return p.start(ctx, e, pgInstance{
		port:     pgListenPort(e, pgPort),
		password: pgPassword,
		tcp: "host   all  all  127.0.0.1/32  scram-sha-256\n" +
			"host   all  all  ::1/128       scram-sha-256\n",
	})
}

// pgInstance is what differs between the stacks' servers (the plain one
// above, the secure variant's in secure.go).
type pgInstance struct {
	port     int
	password string   // the application role's
	tcp      string   // the TCP lines of pg_hba.conf
	settings []string // more server settings, name=value
	// prepare runs before the server starts, on the service's directory
	// (it is then given to the server's user): e.g. to place its TLS files.
	prepare func(dir string) error
}

func (p *Service) start(ctx context.Context, e *compose.Env, inst pgInstance) error {
	cred, err := pgOwner()
	if err != nil {
		return err
	}
	dir := e.Path("pg")
	data := filepath.Join(dir, "data")
	sock := filepath.Join(dir, "run")
	if err := os.MkdirAll(sock, 0o755); err != nil {
		return err
	}
	// Stacks before this one gave the superuser a fixed password and left
	// it in this file; provision clears the password itself.
	if err := compose.RemoveIfExists(filepath.Join(dir, "superuser.pw")); err != nil {
		return err
	}
	if err := writePGAuth(dir, cred, inst.tcp); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if inst.prepare != nil {
		if err := inst.prepare(dir); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	// The server user must be able to reach its directory through the
	// checkout's parents; fail with a clear message rather than a cryptic
	// initdb error.
	if err := chownTree(dir, cred); err != nil {
		return fmt.Errorf("postgres: give %s to the postgres user: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initCluster(ctx, data, p.Logs(e)[0], cred); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	server, err := pgBin("postgres")
	if err != nil {
		return err
	}
	// Sized for a 2-core, shared machine: 256 MB of shared buffers keeps
	// the whole stack well under 4 GiB. max_wal_size is 4 GB
	// (PostgreSQL's default is 1 GB) so that no checkpoint falls inside a
	// cell: each starts right after one, and at ~80k events/s a none cell
	// wrote the ~540 MB that request the next one about 15 s in, inside
	// its measured window (see runner's noteCheckpoints).
	cmd := asOwner(exec.Command(server, serverArgs(dir, inst.port, compose.StartProfile(e, p),
		append([]string{"shared_buffers=256MB", "max_wal_size=4GB"}, inst.settings...)...)...), cred)
	proc := p.Procs(e)[0]
	if err := compose.StartDetached(proc, cmd); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return p.provision(ctx, sock, proc, inst)
}

// initCluster makes a new cluster in data (initdb), its output appended
// to log. No superuser password: the superuser logs in over the socket
// only (peer, see writePGAuth); the server uses our pg_hba.conf.
func initCluster(ctx context.Context, data, log string, cred *syscall.Credential) error {
	initdb, err := pgBin("initdb")
	if err != nil {
		return err
	}
	cmd := asOwner(exec.CommandContext(ctx, initdb, "-D", data, "-U", pgSuperuser,
		"--auth-local=peer", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"), cred)
	if err := compose.RunLogged(ctx, log, cmd); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	return nil
}

// serverArgs are the server's arguments for the cluster in dir/data, its
// socket in dir/run and its authentication files in dir, on port, under
// the durability profile, with more settings (name=value: memory,
// replication, TLS). Durability settings stay at their defaults (fsync,
// synchronous_commit on) except in the os profile, which turns
// synchronous_commit off (fsync stays on: see compose/durability.go).
// wal_level=logical lets the checker's audit be decoded from the WAL
// after a cell instead of written by triggers inside it
// (inbox/auditwal.go); it costs the full new image of an updated row in
// the WAL instead of its changed part.
func serverArgs(dir string, port int, profile string, settings ...string) []string {
	args := []string{"-D", filepath.Join(dir, "data"),
		"-c", "synchronous_commit=" + pgSynchronousCommit(profile),
		"-p", strconv.Itoa(port), "-k", filepath.Join(dir, "run"), "-c", "listen_addresses=127.0.0.1",
		"-c", "hba_file=" + filepath.Join(dir, "pg_hba.conf"),
		"-c", "ident_file=" + filepath.Join(dir, "pg_ident.conf"),
		"-c", "shared_preload_libraries=pg_stat_statements",
		"-c", "pg_stat_statements.track=all",
		"-c", "track_io_timing=on",
		"-c", "max_connections=200",
		"-c", "wal_level=logical",
		"-c", "unix_socket_permissions=0770",
	}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	return args
}

// writePGAuth writes the cluster's authentication rules, rewritten on
// every start: the superuser has no password and connects only over the
// Unix socket, as the operating-system user running bench (or the server's
// own user), checked by the kernel (peer); that is how the stack sets up
// roles and extensions. Every role connects over loopback TCP with a
// password (scram-sha-256): the application role's is in its documented
// URL. tcp are the rules for TCP connections.
func writePGAuth(dir string, cred *syscall.Credential, tcp string) error {
	osUsers := map[string]bool{}
	if u, err := user.Current(); err == nil {
		osUsers[u.Username] = true
	}
	if cred != nil {
		if u, err := user.LookupId(strconv.Itoa(int(cred.Uid))); err == nil {
			osUsers[u.Username] = true
		}
	}
	ident := "# written by bench stack up: who may log in as the superuser over the socket\n"
	for _, u := range sortedKeys(osUsers) {
		ident += fmt.Sprintf("stack  %s  %s\n", u, pgSuperuser)
	}
	hba := "# written by bench stack up\n" +
		"local  all  " + pgSuperuser + "  peer  map=stack\n" + tcp
	if err := os.WriteFile(filepath.Join(dir, "pg_ident.conf"), []byte(ident), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "pg_hba.conf"), []byte(hba), 0o600)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pgListenPort is the port the native server listens on: the configured
// URL's port when it points at loopback, else def.
func pgListenPort(e *compose.Env, def int) int {
	c, err := pgx.ParseConfig(e.Cfg.PGURL)
	if err == nil && c.Port != 0 {
		if ip := net.ParseIP(c.Host); ip != nil && ip.IsLoopback() {
			return int(c.Port)
		}
	}
	return def
}

// provision creates the application role and database once the server
// accepts connections on its socket.
func (p *Service) provision(ctx context.Context, sock string, proc compose.Proc, inst pgInstance) error {
	port := inst.port
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable", sock, port, pgSuperuser)
	var conn *pgx.Conn
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err = pgx.Connect(cctx, dsn)
		cancel()
		if err == nil {
			break
		}
		if !proc.Running() {
			return fmt.Errorf("postgres: the server exited during startup: %w", err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres: no connection on socket %s within 60s: %w", sock, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	defer conn.Close(context.Background())
	verifier, err := pgPasswordVerifier(inst.password)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	stmts := []string{
		fmt.Sprintf(`DO $$ BEGIN
		  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN
		    CREATE ROLE %[1]s LOGIN NOSUPERUSER NOCREATEROLE;
		  END IF;
		END $$`, pgAppRole),
		// The role's password as this stack knows it (a role of an
		// earlier start keeps it otherwise), as its SCRAM verifier: the
		// password itself is in no statement the server records.
		fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", pgAppRole, verifier),
		"GRANT pg_monitor TO " + pgAppRole,
		// A password older stacks set; the superuser logs in by peer only.
		"ALTER ROLE " + pgSuperuser + " PASSWORD NULL",
		"GRANT pg_signal_backend TO " + pgAppRole,
		// The audit's logical decoding slot (not the strategies) needs it.
		"ALTER ROLE " + pgAppRole + " REPLICATION",
		// A rate search checkpoints between its steps (PostgreSQL 15+).
		"GRANT pg_checkpoint TO " + pgAppRole,
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("postgres: provision role: %w", err)
		}
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", pgAppDB).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: provision database: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER %s", pgAppDB, pgAppRole)); err != nil {
			return fmt.Errorf("postgres: create database %s: %w", pgAppDB, err)
		}
	}
	// The extension is created by the superuser once; the app role can then
	// read its view (pg_read_all_stats via pg_monitor shows every query).
	dbconn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", sock, port, pgSuperuser, pgAppDB))
	if err != nil {
		return fmt.Errorf("postgres: connect to %s: %w", pgAppDB, err)
	}
	defer dbconn.Close(context.Background())
	if _, err := dbconn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return fmt.Errorf("postgres: create extension pg_stat_statements: %w", err)
	}
	return nil
}

// Ready connects with the configured URL and asks the server's version.
func (*Service) Ready(ctx context.Context, e *compose.Env) (string, error) {
	conn, err := pgx.Connect(ctx, e.Cfg.PGURL)
	if err != nil {
		return "", Explain(e.Cfg.PGURL, err)
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", err
	}
	return "PostgreSQL " + v, nil
}

// Stop uses a fast shutdown: SIGTERM would be a "smart" shutdown that waits
// for every client to disconnect.
func (p *Service) Stop(ctx context.Context, e *compose.Env) error {
	proc := p.Procs(e)[0]
	if pid, ok := proc.PID(); ok {
		_ = syscall.Kill(pid, syscall.SIGINT)
	}
	return proc.Kill(ctx, 30*time.Second)
}
