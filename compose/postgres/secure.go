package postgres

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/compose"
)

// Secure is the secure variant's PostgreSQL: the plain stack's
// server (Service) on its own port and directory, with ssl=on, the
// stack CA's server certificate, and TCP logins only over TLS with
// scram-sha-256 (hostssl; a plaintext login matches no rule and is
// refused). The application role's password is generated
// (credentials.json). The suite connects with sslmode=verify-full
// against the stack's CA.
type Secure struct{ Service }

const (
	securePGPort = 57432
	// passwordName is the application role's password in the secure
	// stack's credentials.
	passwordName = "postgres_password"
)

// PasswordNames implements compose.Passworder: the application role's.
func (*Secure) PasswordNames() []string { return []string{passwordName} }

// Endpoints implements compose.Endpointer: the URL with the password, verify-full
// and the CA file.
func (p *Secure) Endpoints(e *compose.Env) (map[string]string, error) {
	c, err := compose.ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	return map[string]string{"postgres.url": securePGURL(e, url.UserPassword(pgAppRole, c[passwordName]))}, nil
}

// Addresses implements compose.Addresser: the URL without the password.
func (p *Secure) Addresses(e *compose.Env) map[string]string {
	return map[string]string{"postgres.url": securePGURL(e, url.User(pgAppRole))}
}

func securePGURL(e *compose.Env, user *url.Userinfo) string {
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {compose.TLSPath(e, "ca.crt")}}
	u := url.URL{Scheme: "postgres", User: user, Host: "127.0.0.1:" + strconv.Itoa(securePGPort), Path: "/" + pgAppDB, RawQuery: q.Encode()}
	return u.String()
}

// Ports implements compose.Porter: SQL over TLS.
func (p *Secure) Ports(e *compose.Env) []compose.Port {
	return []compose.Port{{Port: pgListenPort(compose.BindEnv(e, p), securePGPort), What: "SQL over TLS"}}
}

// Start starts the plain stack's server on the secure stack's port, with
// TLS and its certificate, and the generated password.
func (p *Secure) Start(ctx context.Context, e *compose.Env) error {
	c, err := compose.EnsureSecrets(e, "postgres")
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	se := compose.BindEnv(e, p)
	tlsDir := func(dir string) string { return filepath.Join(dir, "tls") }
	return p.start(ctx, se, pgInstance{
		port:     pgListenPort(se, securePGPort),
		password: c[passwordName],
		tcp: "hostssl    all  all  127.0.0.1/32  scram-sha-256\n" +
			"hostssl    all  all  ::1/128       scram-sha-256\n" +
			"hostnossl  all  all  all           reject\n",
		settings: []string{"ssl=on",
			"ssl_cert_file=" + filepath.Join(tlsDir(se.Path("pg")), "server.crt"),
			"ssl_key_file=" + filepath.Join(tlsDir(se.Path("pg")), "server.key"),
			"ssl_min_protocol_version=TLSv1.2",
			"password_encryption=scram-sha-256"},
		// The server reads its key as its own user, and refuses a key
		// others may read: copies in its directory, given to it with
		// the rest.
		prepare: func(dir string) error {
			if err := os.MkdirAll(tlsDir(dir), 0o700); err != nil {
				return err
			}
			for src, dst := range map[string]string{"postgres.crt": "server.crt", "postgres.key": "server.key"} {
				b, err := os.ReadFile(compose.TLSPath(e, src))
				if err != nil {
					return err
				}
				if err := compose.WriteFileAtomic(filepath.Join(tlsDir(dir), dst), b, 0o600); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

// Ready connects over TLS with verify-full and says so in the version.
func (p *Secure) Ready(ctx context.Context, e *compose.Env) (string, error) {
	secured := ""
	if cc, err := pgx.ParseConfig(e.Cfg.PGURL); err == nil && cc.TLSConfig != nil {
		secured = ", TLS"
	}
	return compose.SecureReady(ctx, e, p.Service.Ready, secured)
}
