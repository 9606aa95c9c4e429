package tlsfiles

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/config"
)

// The settings a driver would register; config's tests have no drivers.
var keys = Keys{
	CA:         config.Register(config.Setting{Key: "tt.ca-file", Flag: "tt-ca-file", Env: "INBOXBENCH_TT_CA_FILE", Usage: "ca"}),
	Cert:       config.Register(config.Setting{Key: "tt.cert-file", Flag: "tt-cert-file", Env: "INBOXBENCH_TT_CERT_FILE", Usage: "cert"}),
	Key:        config.Register(config.Setting{Key: "tt.key-file", Flag: "tt-key-file", Env: "INBOXBENCH_TT_KEY_FILE", Usage: "key"}),
	ServerName: config.Register(config.Setting{Key: "tt.server-name", Flag: "tt-server-name", Env: "INBOXBENCH_TT_SERVER_NAME", Usage: "name"}),
	Addr:       config.Register(config.Setting{Key: "tt.addr", Flag: "tt-addr", Env: "INBOXBENCH_TT_ADDR", Usage: "addr"}),
	Switch:     config.Register(config.Setting{Key: "tt.tls", Flag: "tt-tls", Env: "INBOXBENCH_TT_TLS", Kind: config.Bool, Usage: "tls"}),
}

// pki is a CA and what it signs, written to a directory.
type pki struct {
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), ca: ca, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	writePEM(t, filepath.Join(p.dir, "ca.crt"), "CERTIFICATE", der)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes name.crt and name.key, valid from notBefore to notAfter,
// for 127.0.0.1 and localhost.
func (p *pki) issue(t *testing.T, name string, notBefore, notAfter time.Time) (certPath, keyPath string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certPath, keyPath = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "PRIVATE KEY", kder)
	return certPath, keyPath
}

func settingKey(t *testing.T, err error) string {
	t.Helper()
	var se *config.SettingError
	if !errors.As(err, &se) {
		t.Fatalf("want a setting error, got %v", err)
	}
	return se.Key
}

// TestCheckRefusesWhatCannotWork: settings that cannot work are refused
// before any dial, naming the setting.
func TestCheckRefusesWhatCannotWork(t *testing.T) {
	p := newPKI(t, "test CA")
	now := time.Now()
	cert, key := p.issue(t, "client", now.Add(-time.Hour), now.Add(time.Hour))
	oldCert, oldKey := p.issue(t, "old", now.Add(-2*time.Hour), now.Add(-time.Hour))
	_, otherKey := p.issue(t, "other", now.Add(-time.Hour), now.Add(time.Hour))
	notPEM := filepath.Join(p.dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := config.Default()
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want string // key named; "" for no error
	}{
		{"nothing", base, ""},
		{"a whole pair and a CA", base.With(keys.CA, p.dir+"/ca.crt").With(keys.Cert, cert).With(keys.Key, key), ""},
		{"certificate without its key", base.With(keys.Cert, cert), keys.Key},
		{"key without its certificate", base.With(keys.Key, key), keys.Cert},
		{"a CA file that does not exist", base.With(keys.CA, p.dir+"/missing.crt"), keys.CA},
		{"a CA file that is not PEM", base.With(keys.CA, notPEM), keys.CA},
		{"a key that is not the certificate's", base.With(keys.Cert, cert).With(keys.Key, otherKey), keys.Cert},
		{"an expired client certificate", base.With(keys.Cert, oldCert).With(keys.Key, oldKey), keys.Cert},
		{"a key file that does not exist", base.With(keys.Cert, cert).With(keys.Key, p.dir+"/nope.key"), keys.Key},
	} {
		err := Check(tc.cfg, keys)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case tc.want != "":
			if got := settingKey(t, err); got != tc.want {
				t.Errorf("%s: names %s, want %s (%v)", tc.name, got, tc.want, err)
			}
		}
	}
}

// TestSwitchOffWithFiles: the switch set to false turns TLS off whatever
// else is set; files the user gave with it are refused as ignored.
func TestSwitchOffWithFiles(t *testing.T) {
	t.Setenv("INBOXBENCH_TT_TLS", "false")
	c, err := config.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if keys.On(c.With(keys.CA, "/x")) {
		t.Error("TLS on although the user switched it off")
	}
	if !keys.On(config.Default().With(keys.CA, "/x")) {
		t.Error("a CA file alone does not turn TLS on")
	}
	t.Setenv("INBOXBENCH_TT_CA_FILE", "/x")
	c, err = config.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if got := settingKey(t, Check(c, keys)); got != keys.CA {
		t.Errorf("names %s, want %s", got, keys.CA)
	}
}

// TestExplainHandshakes dials a TLS listener of this test (a Go server:
// the servers of the secure stack are tried by the drivers' tests; an
// expired server certificate exists only here) and checks each failure
// is explained naming the setting to change.
func TestExplainHandshakes(t *testing.T) {
	p := newPKI(t, "test CA")
	foreign := newPKI(t, "foreign CA")
	now := time.Now()
	srvCert, srvKey := p.issue(t, "server", now.Add(-time.Hour), now.Add(time.Hour))
	oldCert, oldKey := p.issue(t, "old-server", now.Add(-2*time.Hour), now.Add(-time.Hour))
	clientCert, clientKey := foreign.issue(t, "client", now.Add(-time.Hour), now.Add(time.Hour))

	serve := func(certPath, keyPath string, requireClient bool) string {
		pair, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			t.Fatal(err)
		}
		sc := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: p.pool, MinVersion: tls.VersionTLS12}
		if requireClient {
			sc.ClientAuth = tls.RequireAndVerifyClientCert
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					_ = c.(*tls.Conn).Handshake()
					b := make([]byte, 1)
					_, _ = c.Read(b)
					c.Close()
				}()
			}
		}()
		return ln.Addr().String()
	}
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.0 400 not TLS\r\n\r\n"))
			c.Close()
		}
	}()

	dial := func(addr string, cfg config.Config) error {
		tc, err := Config(cfg, keys)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return Explain(err, cfg, keys)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return Explain(err, cfg, keys)
		}
		_, err = c.Read(make([]byte, 1)) // a TLS 1.3 server refuses a client certificate after the client's handshake
		return Explain(err, cfg, keys)
	}
	good := config.Default().With(keys.CA, p.dir+"/ca.crt")
	addr := serve(srvCert, srvKey, false)
	for _, tc := range []struct {
		name, addr string
		cfg        config.Config
		want, text string
	}{
		{"unknown CA", addr, config.Default().With(keys.CA, foreign.dir+"/ca.crt"), keys.CA, "not hold"},
		{"server name", addr, good.With(keys.ServerName, "db.example"), keys.ServerName, "localhost"},
		{"expired server certificate", serve(oldCert, oldKey, false), good, keys.Addr, "expired"},
		{"client certificate required", serve(srvCert, srvKey, true), good, keys.Cert, "requires a client certificate"},
		{"client certificate of a foreign CA", serve(srvCert, srvKey, true), good.With(keys.Cert, clientCert).With(keys.Key, clientKey), keys.Cert, "refused the client certificate"},
		{"not a TLS server", plain.Addr().String(), good, keys.Addr, "does not speak TLS"},
	} {
		err := dial(tc.addr, tc.cfg)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if got := settingKey(t, err); got != tc.want || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want it to name %s and say %q", tc.name, err, tc.want, tc.text)
		}
	}
}
