// Package tlsfiles builds a client's TLS configuration from the settings
// every service has alike (a CA file, a client certificate and its key, a
// server name), checks those settings before a command starts, and turns
// what a failed TLS handshake returns into an error that names the
// setting to change.
//
// Each driver registers its own settings (kafka.ca-file, rabbitmq.ca-file,
// …) and hands their keys here as a Keys; nothing here knows a service.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/config"
)

// Keys are the setting keys of one service's TLS files.
type Keys struct {
	// CA is a PEM file of the CA certificates that may sign the server's
	// certificate; empty: the system's roots.
	CA string
	// Cert and Key are the client certificate (PEM, the chain) and its
	// private key (PEM), given together or not at all.
	Cert, Key string
	// ServerName is the name the server's certificate must hold; empty:
	// the host of the address dialled.
	ServerName string
	// Addr is the setting holding the addresses dialled: what an error
	// about the server's side names (its certificate expired, it does not
	// speak TLS there).
	Addr string
	// Switch is the boolean setting that turns TLS on ("" when something
	// else decides, such as a URL's scheme).
	Switch string
}

// Given reports whether cfg sets any of the files or the server name.
func (k Keys) Given(cfg config.Config) bool {
	for _, key := range k.files() {
		if cfg.Get(key) != "" {
			return true
		}
	}
	return false
}

func (k Keys) files() []string {
	var out []string
	for _, key := range []string{k.CA, k.Cert, k.Key, k.ServerName} {
		if key != "" {
			out = append(out, key)
		}
	}
	return out
}

// On reports whether cfg asks for TLS: the switch when the user set it
// (false turns TLS off whatever a local stack's variant supplied), else
// the switch or any of the files.
func (k Keys) On(cfg config.Config) bool {
	if k.Switch != "" && cfg.Given(k.Switch) {
		return cfg.Bool(k.Switch)
	}
	return (k.Switch != "" && cfg.Bool(k.Switch)) || k.Given(cfg)
}

// Check validates the settings without a network: the CA file exists and
// holds a certificate, a client certificate comes with its key and the
// two match, and neither certificate has expired. Each error is a
// *config.SettingError naming the setting to change.
func Check(cfg config.Config, k Keys) error {
	if !k.On(cfg) {
		// Files the user gave with TLS switched off would be ignored.
		for _, key := range k.files() {
			if cfg.Given(key) && cfg.Get(key) != "" {
				return config.Invalid(key, nil, "set, but %s turns TLS off, so it would be ignored: turn TLS on, or unset it", k.Switch)
			}
		}
		return nil
	}
	_, err := Config(cfg, k)
	return err
}

// Config returns the client TLS configuration the settings describe
// (TLS 1.2 or newer; the system roots when no CA file is set).
func Config(cfg config.Config, k Keys) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if k.ServerName != "" {
		tc.ServerName = cfg.Get(k.ServerName)
	}
	if k.CA != "" {
		if path := cfg.Get(k.CA); path != "" {
			pool, err := loadCA(path)
			if err != nil {
				return nil, config.Invalid(k.CA, path, "%v", err)
			}
			tc.RootCAs = pool
		}
	}
	certPath, keyPath := get(cfg, k.Cert), get(cfg, k.Key)
	switch {
	case certPath == "" && keyPath == "":
		return tc, nil
	case certPath == "":
		return nil, config.Invalid(k.Cert, nil, "missing: %s is set, so give the client certificate it belongs to (PEM), or unset both", k.Key)
	case keyPath == "":
		return nil, config.Invalid(k.Key, nil, "missing: %s is set, so give the private key of that certificate (PEM), or unset both", k.Cert)
	}
	for key, path := range map[string]string{k.Cert: certPath, k.Key: keyPath} {
		if _, err := os.Stat(path); err != nil {
			return nil, config.Invalid(key, path, "%v", unwrapPath(err))
		}
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, config.Invalid(k.Cert, certPath, "cannot be used with %s %q: %v", k.Key, keyPath, err)
	}
	if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
		if now := time.Now(); now.After(leaf.NotAfter) {
			return nil, config.Invalid(k.Cert, certPath, "the client certificate expired at %s: renew it (the local secure stack renews its own at 'bench stack up --secure')", leaf.NotAfter.UTC().Format(time.RFC3339))
		} else if now.Before(leaf.NotBefore) {
			return nil, config.Invalid(k.Cert, certPath, "the client certificate is valid only from %s: check this host's clock", leaf.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	tc.Certificates = []tls.Certificate{pair}
	return tc, nil
}

func get(cfg config.Config, key string) string {
	if key == "" {
		return ""
	}
	return cfg.Get(key)
}

// loadCA reads a PEM file of CA certificates, refusing one without any,
// or with only expired ones.
func loadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	pool := x509.NewCertPool()
	n, expired := 0, 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the file does not parse: %v", n+1, err)
		}
		n++
		if time.Now().After(c.NotAfter) {
			expired++
		}
		pool.AddCert(c)
	}
	switch {
	case n == 0:
		return nil, errors.New("holds no PEM certificate (-----BEGIN CERTIFICATE-----): give the CA certificate file of the servers")
	case expired == n:
		return nil, errors.New("every CA certificate in it has expired: give the CA's current certificate")
	}
	return pool, nil
}

// unwrapPath drops the path from an *os.PathError: the setting error
// shows the path already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// Explain turns a failed TLS handshake into an error naming the setting
// to change and what to do; other errors come back unchanged. A server
// that refuses the handshake is read in the light of cfg: whether a
// client certificate was offered.
func Explain(err error, cfg config.Config, k Keys) error {
	if err == nil {
		return nil
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknown):
		issuer := "an unknown CA"
		if unknown.Cert != nil {
			issuer = fmt.Sprintf("%q", unknown.Cert.Issuer.String())
		}
		return config.Invalid(k.CA, nil, "the server's certificate is signed by %s, which this CA file does not hold (%v): set it to the CA certificate of the servers", issuer, err)
	case errors.As(err, &hostname):
		names := hostname.Certificate.DNSNames
		for _, ip := range hostname.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		return config.Invalid(k.ServerName, nil, "the server's certificate is for %s, not %q: set it to one of those names (or dial the server by one)", strings.Join(names, ", "), hostname.Host)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return config.Invalid(k.Addr, nil, "the server's certificate expired at %s (%v): the server must renew it (the local secure stack renews its own at 'bench stack up --secure')", invalid.Cert.NotAfter.UTC().Format(time.RFC3339), err)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return config.Invalid(k.Addr, nil, "the server does not speak TLS there (%v): dial its TLS listener, or turn TLS off for a plaintext one", err)
	case strings.Contains(msg, "remote error: tls: "):
		alert := msg[strings.Index(msg, "remote error: tls: ")+len("remote error: tls: "):]
		if i := strings.IndexAny(alert, "\"()\\"); i >= 0 {
			alert = alert[:i] // the rest is a wrapping error's quoting
		}
		alert = strings.TrimSpace(alert)
		certAlert := false
		for _, a := range []string{"certificate required", "bad certificate", "unknown certificate authority", "unsupported certificate", "certificate unknown", "handshake failure", "expired"} {
			certAlert = certAlert || strings.Contains(alert, a)
		}
		switch {
		case certAlert && get(cfg, k.Cert) == "":
			return config.Invalid(k.Cert, nil, "the server requires a client certificate and refused the handshake without one (%s): set %s and %s", alert, k.Cert, k.Key)
		case strings.Contains(alert, "expired"):
			return config.Invalid(k.Cert, nil, "the server refused the client certificate as expired (%s): renew it", alert)
		case certAlert:
			return config.Invalid(k.Cert, nil, "the server refused the client certificate (%s): give one signed by a CA the server trusts", alert)
		}
		return config.Invalid(k.Addr, nil, "the server ended the TLS handshake (%s)", alert)
	}
	return err
}
