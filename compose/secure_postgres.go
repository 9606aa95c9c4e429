package compose

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// SecurePostgres is the secure variant's PostgreSQL: the plain stack's
// server (postgres.go) on its own port and directory, with ssl=on, the
// stack CA's server certificate, and TCP logins only over TLS with
// scram-sha-256 (hostssl; a plaintext login matches no rule and is
// refused). The application role's password is generated
// (credentials.json). The suite connects with sslmode=verify-full
// against the stack's CA.
type SecurePostgres struct{ Postgres }

const securePGPort = 57432

func init() { registerIn(VariantSecure, 1, &SecurePostgres{}) }

// Endpoints implements Endpointer: the URL with the password, verify-full
// and the CA file.
func (p *SecurePostgres) Endpoints(e *Env) (map[string]string, error) {
	c, err := ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	return map[string]string{"postgres.url": securePGURL(e, url.UserPassword(pgAppRole, c.Postgres))}, nil
}

// Addresses implements Addresser.
func (p *SecurePostgres) Addresses(e *Env) map[string]string {
	return map[string]string{"postgres.url": securePGURL(e, url.User(pgAppRole))}
}

func securePGURL(e *Env, user *url.Userinfo) string {
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {TLSPath(e, "ca.crt")}}
	u := url.URL{Scheme: "postgres", User: user, Host: "127.0.0.1:" + strconv.Itoa(securePGPort), Path: "/" + pgAppDB, RawQuery: q.Encode()}
	return u.String()
}

func (p *SecurePostgres) Ports(e *Env) []Port {
	return []Port{{Port: pgListenPort(bindEnv(e, p), securePGPort), What: "SQL over TLS"}}
}

func (p *SecurePostgres) Start(ctx context.Context, e *Env) error {
	c, err := ensureSecrets(e, "postgres")
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	se := bindEnv(e, p)
	tlsDir := func(dir string) string { return filepath.Join(dir, "tls") }
	return p.start(ctx, se, pgInstance{
		port:     pgListenPort(se, securePGPort),
		password: c.Postgres,
		tcp: "hostssl    all  all  127.0.0.1/32  scram-sha-256\n" +
			"hostssl    all  all  ::1/128       scram-sha-256\n" +
			"hostnossl  all  all  all           reject\n",
		args: []string{"-c", "ssl=on",
			"-c", "ssl_cert_file=" + filepath.Join(tlsDir(se.Path("pg")), "server.crt"),
			"-c", "ssl_key_file=" + filepath.Join(tlsDir(se.Path("pg")), "server.key"),
			"-c", "ssl_min_protocol_version=TLSv1.2",
			"-c", "password_encryption=scram-sha-256"},
		// The server reads its key as its own user, and refuses a key
		// others may read: copies in its directory, given to it with
		// the rest.
		prepare: func(dir string) error {
			if err := os.MkdirAll(tlsDir(dir), 0o700); err != nil {
				return err
			}
			for src, dst := range map[string]string{"postgres.crt": "server.crt", "postgres.key": "server.key"} {
				b, err := os.ReadFile(TLSPath(e, src))
				if err != nil {
					return err
				}
				if err := writeFileAtomic(filepath.Join(tlsDir(dir), dst), b, 0o600); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

// Ready connects over TLS with verify-full and says so in the version.
func (p *SecurePostgres) Ready(ctx context.Context, e *Env) (string, error) {
	return secureReady(ctx, e, func(ctx context.Context, se *Env) (string, error) {
		v, err := p.Postgres.Ready(ctx, se)
		if err != nil {
			return "", err
		}
		if cc, err := pgx.ParseConfig(se.Cfg.PGURL); err == nil && cc.TLSConfig != nil {
			v += ", TLS"
		}
		return v, nil
	})
}
