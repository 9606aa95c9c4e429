package dbcalib

import (
	"errors"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// withoutPassword splits a libpq URL or key=value DSN into what pgbench
// may have on its command line, which `ps` shows to every user of the
// host, and a passfile holding the password (mode 0600, removed by the
// caller; "" when there is no password). The connection string left is
// checked to reach the same host, port, user and database, and to hold
// the password in no form.
func withoutPassword(conn string) (string, string, error) {
	orig, err := pgconn.ParseConfig(conn)
	if err != nil {
		return "", "", err // pgconn masks the password in its errors
	}
	stripped := stripPassword(conn)
	if stripped == conn {
		return conn, "", nil
	}
	left, err := pgconn.ParseConfig(stripped)
	if err != nil || left.Host != orig.Host || left.Port != orig.Port || left.User != orig.User || left.Database != orig.Database {
		return "", "", errors.New("cannot take the password out of the PostgreSQL URL for pgbench's command line: percent-encode its reserved characters, or give the password in PGPASSWORD or a passfile instead")
	}
	pw := orig.Password
	for _, form := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
		if pw != "" && strings.Contains(stripped, form) {
			return "", "", errors.New("the PostgreSQL password is also elsewhere in the URL: pgbench would show it on its command line")
		}
	}
	if pw == "" {
		return stripped, "", nil
	}
	if strings.ContainsAny(pw, "\r\n") {
		return "", "", errors.New("the PostgreSQL password has a line break, which a passfile cannot hold: pgbench cannot be given it without its command line")
	}
	f, err := os.CreateTemp("", "inboxbench-pgpass-*") // mode 0600
	if err != nil {
		return "", "", err
	}
	// Every host, port, database and user: pgbench connects only where
	// the connection string says. ':' and '\\' are escaped with '\\'.
	line := "*:*:*:*:" + strings.NewReplacer(`\`, `\\`, ":", `\:`).Replace(pw) + "\n"
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", "", err
	}
	return stripped, f.Name(), nil
}

// dsnPassword is a password=… pair of a key=value DSN, its value quoted
// ('…' with \' escapes) or bare.
var dsnPassword = regexp.MustCompile(`(?:^|\s+)password\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S*)`)

// stripPassword takes the password out of a URL's userinfo and query, or
// out of a key=value DSN.
func stripPassword(conn string) string {
	i := strings.Index(conn, "://")
	if i < 0 {
		return strings.TrimSpace(dsnPassword.ReplaceAllString(conn, ""))
	}
	rest := conn[i+3:]
	end := len(rest)
	if q := strings.IndexAny(rest, "/?#"); q >= 0 {
		end = q
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, _, _ := strings.Cut(authority[:at], ":")
		authority = user + authority[at:]
	}
	if path, query, ok := strings.Cut(tail, "?"); ok {
		var kept []string
		for _, kv := range strings.Split(query, "&") {
			if k, _, _ := strings.Cut(kv, "="); k != "password" {
				kept = append(kept, kv)
			}
		}
		tail = path
		if len(kept) > 0 {
			tail += "?" + strings.Join(kept, "&")
		}
	}
	return conn[:i+3] + authority + tail
}
