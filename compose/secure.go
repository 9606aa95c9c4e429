package compose

// The secure variant's key material: a CA, one server certificate per
// service, a client certificate, and the services' generated passwords,
// all written by `bench stack up --secure` under <stack-dir>/secure and
// read by the services' Endpoints. Nothing here is a default anyone else
// knows: the passwords are random, the CA exists only on this host.
//
//   secure/tls/ca.crt, ca.key              the CA (key 0600)
//   secure/tls/<service>.crt, .key         a server certificate per service
//   secure/tls/client.crt, client.key      the suite's client certificate
//   secure/credentials.json                users and passwords (0600)
//
// Certificates name 127.0.0.1, ::1 and localhost, are ECDSA P-256 keys in
// PKCS #8 (what Netty, Erlang, PostgreSQL and Kafka's PEM stores all
// read), and are issued again at `up` when they expire within 30 days or
// no longer chain to the CA.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Lifetimes of what the secure stack issues.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// SecureUser is the user every secure service gives the suite: an
// ordinary one, with only what the suite needs.
const SecureUser = "inboxbench"

// Credentials are the secure stack's generated passwords
// (credentials.json), by the names its services declare (Passworder):
// "postgres_password", "kafka_admin_password" … Admin users exist where
// the service needs one to set up the suite's user (Kafka's inter-broker
// login, RocketMQ's initial super user); the suite never uses them.
type Credentials map[string]string

// Passworder is implemented by the secure stack's services whose users
// log in with passwords the stack generates: their names in Credentials.
// Every registered service's are generated together, at the secure
// stack's first start.
type Passworder interface {
	PasswordNames() []string
}

// secretsMu serialises writing the key material: `up` starts the
// services in parallel and each makes sure it exists.
var secretsMu sync.Mutex

// TLSPath is the path of a file of the secure stack's TLS material
// (ca.crt, <service>.crt, client.key …).
func TLSPath(e *Env, name string) string {
	return (&Env{Dir: e.Dir, Variant: VariantSecure}).Path("tls", name)
}

func credentialsPath(e *Env) string {
	return (&Env{Dir: e.Dir, Variant: VariantSecure}).Path("credentials.json")
}

// ReadCredentials reads the secure stack's passwords; an error when
// `bench stack up --secure` has not written them.
func ReadCredentials(e *Env) (Credentials, error) {
	c := Credentials{}
	b, err := os.ReadFile(credentialsPath(e))
	if errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("no credentials at %s yet", credentialsPath(e))
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", credentialsPath(e), err)
	}
	return c, nil
}

// EnsureSecrets writes whatever of the CA, the certificates named by
// servers (plus the client's) and the credentials is missing, expiring
// or no longer signed by the CA, and returns the credentials: what a
// secure service's Start begins with.
func EnsureSecrets(e *Env, servers ...string) (Credentials, error) {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(TLSPath(e, "ca.crt")), 0o700); err != nil {
		return Credentials{}, err
	}
	ca, caKey, err := ensureCA(e)
	if err != nil {
		return Credentials{}, fmt.Errorf("secure stack CA: %w", err)
	}
	for _, name := range append([]string{"client"}, servers...) {
		if err := ensureLeaf(e, name, ca, caKey); err != nil {
			return Credentials{}, fmt.Errorf("secure stack certificate %s: %w", name, err)
		}
	}
	return ensureCredentials(e)
}

func ensureCA(e *Env) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := TLSPath(e, "ca.crt"), TLSPath(e, "ca.key")
	if c, k, err := readPair(certPath, keyPath); err == nil && time.Until(c.NotAfter) > renewBefore {
		return c, k, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "inboxbench secure stack CA", Organization: []string{"inboxbench"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// ensureLeaf issues <name>.crt and .key: a server certificate for a
// service, a client certificate for "client".
func ensureLeaf(e *Env, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	certPath, keyPath := TLSPath(e, name+".crt"), TLSPath(e, name+".key")
	if c, _, err := readPair(certPath, keyPath); err == nil && time.Until(c.NotAfter) > renewBefore && c.CheckSignatureFrom(ca) == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, LeafTemplate(name, time.Now(), leafLifetime), ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, der, key)
}

// LeafTemplate is the certificate the secure stack issues to name
// ("client", or a service), valid from notBefore for lifetime: a server
// certificate for 127.0.0.1, ::1 and localhost, or the suite's client
// certificate (CN inboxbench). Tests issue certificates from it with
// IssueLeaf to try what a server does with an expired or foreign one.
func LeafTemplate(name string, notBefore time.Time, lifetime time.Duration) *x509.Certificate {
	t := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"inboxbench"}},
		NotBefore:    notBefore.Add(-time.Hour),
		NotAfter:     notBefore.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if name == "client" {
		t.Subject.CommonName = SecureUser
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		return t
	}
	t.DNSNames = []string{"localhost"}
	t.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	// Servers also dial each other (a RocketMQ broker its name server,
	// Kafka's inter-broker listener) with the same certificate.
	t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	return t
}

// IssueLeaf signs tmpl with the secure stack's CA and writes the
// certificate and its new key (0600) to certPath and keyPath.
func IssueLeaf(e *Env, tmpl *x509.Certificate, certPath, keyPath string) error {
	ca, caKey, err := readPair(TLSPath(e, "ca.crt"), TLSPath(e, "ca.key"))
	if err != nil {
		return fmt.Errorf("the secure stack's CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, der, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func readPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	c, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kblock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not an ECDSA key", keyPath)
	}
	return c, ek, nil
}

// writePair writes a certificate (0644) and its private key in PKCS #8
// (0600), each to a temporary file renamed into place.
func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// WriteFileAtomic writes b to path with mode, through a temporary file
// renamed into place: no reader sees it half written, nor with a wider
// mode.
func WriteFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ensureCredentials generates the passwords the secure stack's services
// declare (Passworder) once (credentials.json, 0600); every later `up`
// reuses them, since the services' data keeps them, and adds only the
// passwords of a service that had none yet.
func ensureCredentials(e *Env) (Credentials, error) {
	c, err := ReadCredentials(e)
	if err != nil {
		c = Credentials{}
	}
	added := false
	for _, s := range Services(VariantSecure) {
		if p, ok := s.(Passworder); ok {
			for _, name := range p.PasswordNames() {
				if c[name] == "" {
					c[name], added = password(), true
				}
			}
		}
	}
	if err == nil && !added {
		return c, nil
	}
	if err := os.MkdirAll(filepath.Dir(credentialsPath(e)), 0o755); err != nil {
		return Credentials{}, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return c, err
	}
	return c, WriteFileAtomic(credentialsPath(e), b, 0o600)
}

// password is 24 random bytes, base64url: no character a URL, a
// properties file or a JAAS line would need escaped. It never starts
// with '-': a vendor tool's command line (RocketMQ's benchmarks, parsed
// by commons-cli) took such a value for an option and refused to start,
// one secure stack in 64.
func password() string {
	b := make([]byte, 24)
	for {
		if _, err := rand.Read(b); err != nil {
			panic(err) // crypto/rand does not fail
		}
		if p := base64.RawURLEncoding.EncodeToString(b); p[0] != '-' {
			return p
		}
	}
}

// SecureReady is the readiness check of a secure service: none before
// its credentials exist (whatever answers at its addresses is not it),
// else ready's, with secured (what protects the service: ", TLS …")
// after the version.
func SecureReady(ctx context.Context, e *Env, ready func(context.Context, *Env) (string, error), secured string) (string, error) {
	if _, err := ReadCredentials(e); err != nil {
		return "", fmt.Errorf("not started by 'bench stack up --secure' yet: %w", err)
	}
	v, err := ready(ctx, e)
	if err != nil {
		return "", err
	}
	return v + secured, nil
}

// WithPassword is a secure service's Endpoints: its addresses, and the
// password of the credential name under the setting key.
func WithPassword(e *Env, a Addresser, key, name string) (map[string]string, error) {
	c, err := ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	vals := a.Addresses(e)
	vals[key] = c[name]
	return vals, nil
}

// BindEnv is e for what a secure service binds and starts: its
// addresses in place of every setting the user did not give, whatever
// e.Cfg holds (a command that did not apply the variant would otherwise
// start it on the plain stack's ports).
func BindEnv(e *Env, a Addresser) *Env {
	n := *e
	n.Cfg = e.Cfg.WithDefaults(a.Addresses(e))
	return &n
}
