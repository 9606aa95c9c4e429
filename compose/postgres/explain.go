package postgres

import (
	"crypto/x509"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxbench/inboxbench/config"
)

// Explain turns what pgx returns when the server refuses the
// connection settings of pgURL (TLS, password, pg_hba.conf rules,
// privileges) into an error naming postgres.url and what to change in
// it, keeping the server's words; any other error comes back unchanged.
func Explain(pgURL string, err error) error {
	if err == nil {
		return nil
	}
	var se *config.SettingError
	if errors.As(err, &se) {
		return err
	}
	user := "?"
	if c, perr := pgx.ParseConfig(pgURL); perr == nil {
		user = c.User
	}
	var (
		pe       *pgconn.PgError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &pe) && pe.Code == "28P01":
		return config.Invalid(pgURLKey, nil, "the server refused the password of user %q (%v): check the password in the URL", user, err)
	case errors.As(err, &pe) && pe.Code == "28000" && strings.Contains(pe.Message, "no encryption"):
		return config.Invalid(pgURLKey, nil, "the server accepts this login only over TLS (%v): set sslmode=verify-full and sslrootcert=<its CA file> in the URL", err)
	case errors.As(err, &pe) && pe.Code == "28000":
		return config.Invalid(pgURLKey, nil, "the server's pg_hba.conf has no rule for this login (%v): log in as a user, database and encryption it allows", err)
	case errors.As(err, &pe) && pe.Code == "42501":
		return config.Invalid(pgURLKey, nil, "user %q lacks a privilege (%v): the suite creates its own schemas in the URL's database, so grant it CREATE there", user, err)
	case errors.As(err, &unknown):
		return config.Invalid(pgURLKey, nil, "the server's certificate is not signed by the CA in sslrootcert (%v): set sslrootcert in the URL to the CA file of the server", err)
	case errors.As(err, &hostname):
		return config.Invalid(pgURLKey, nil, "the server's certificate does not name the URL's host (%v): connect by a name the certificate holds (sslmode=verify-full checks it)", err)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return config.Invalid(pgURLKey, nil, "the server's certificate has expired (%v): the server must renew it", err)
	case strings.Contains(msg, "server refused TLS connection"):
		return config.Invalid(pgURLKey, nil, "the server does not speak TLS (%v): use sslmode=disable for a plaintext server, or connect to its TLS port", err)
	}
	return err
}

// pgURLKey is the configuration key of the PostgreSQL URL.
const pgURLKey = "postgres.url"
