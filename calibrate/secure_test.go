package calibrate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pkcs12 "software.sslmate.com/src/go-pkcs12"

	kafkadriver "github.com/inboxbench/inboxbench/brokers/kafka"
	rabbitdriver "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	rocketdriver "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

// Recognisable secrets: none may show on a command line, in a log or in
// an error.
const (
	kafkaPassword  = `Kafka-Pw-1"\ x`
	rabbitPassword = "Rabbit-Pw-2%x"
	rocketSecret   = "-Rocket-Sk-3" // a leading dash, as one generated key in 64 has
)

// pemFiles writes a CA and a client certificate signed by it (PEM) into
// dir and returns their paths and the CA.
func pemFiles(t *testing.T, dir string) (caFile, certFile, keyFile string, ca *x509.Certificate) {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "inboxbench client"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	return write("ca.pem", "CERTIFICATE", caDER), write("client.pem", "CERTIFICATE", leafDER), write("client-key.pem", "PRIVATE KEY", keyDER), ca
}

// secureRunner is a runner over a secured cluster of every broker.
func secureRunner(t *testing.T) (*runner, *x509.Certificate) {
	dir := t.TempDir()
	caFile, certFile, keyFile, ca := pemFiles(t, dir)
	q := url.Values{"cacertfile": {caFile}, "certfile": {certFile}, "keyfile": {keyFile}}
	rabbit := "amqps://suite:" + url.QueryEscape(rabbitPassword) + "@127.0.0.1:57671/inboxbench?" + q.Encode()
	cfg := config.Default().With(kafkadriver.SettingBrokers, "127.0.0.1:57092").With(kafkadriver.SettingTLS, "true").
		With(kafkadriver.SettingCAFile, caFile).With(kafkadriver.SettingCertFile, certFile).With(kafkadriver.SettingKeyFile, keyFile).
		With(kafkadriver.SettingSASL, "scram-sha-512").With(kafkadriver.SettingUser, "suite").
		With(kafkadriver.SettingPassword, kafkaPassword).With(rabbitdriver.SettingURL, rabbit).
		With(rocketdriver.SettingAccessKey, "suite").With(rocketdriver.SettingSecretKey, rocketSecret).
		With(rocketdriver.SettingCAFile, caFile).With(rocketdriver.SettingCertFile, certFile).With(rocketdriver.SettingKeyFile, keyFile)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &runner{Options: Options{Cfg: cfg, Shape: DefaultShape(), Duration: 5 * time.Second}, java: "java", classpath: "lib/*", logDir: filepath.Join(dir, "logs")}
	t.Cleanup(r.removePrivate)
	return r, ca
}

func holdsSecret(args ...string) string {
	for _, a := range args {
		for _, s := range []string{"Kafka-Pw-1", "Rabbit-Pw-2", rocketSecret} {
			if strings.Contains(a, s) {
				return s
			}
		}
	}
	return ""
}

// privateFile checks that path is a file of mode 0600 in a directory of
// mode 0700, and returns its text.
func privateFile(t *testing.T, path string) string {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := os.Stat(filepath.Dir(path))
	if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v in a directory of mode %v, want 0600 in 0700", path, st.Mode().Perm(), dst.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestKafkaToolsGetTheClusterSettingsInAFile: Kafka's tools reach a
// SASL_SSL cluster through a client properties file that holds the
// mechanism, the JAAS login and the CA as a PEM trust store; the password
// is on no command line.
func TestKafkaToolsGetTheClusterSettingsInAFile(t *testing.T) {
	r, _ := secureRunner(t)
	if err := (kafkaVendor{}).check(r.Cfg); err != nil {
		t.Fatalf("calibrate refuses a SASL_SSL cluster: %v", err)
	}
	prod, err := r.kafkaProducerCmd("t", 10, 1000, "-1", "acks=all")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := r.kafkaConsumerCmd("t", 10)
	if err != nil {
		t.Fatal(err)
	}
	for flag, cmd := range map[string][]string{"--producer.config": prod, "--consumer.config": cons} {
		if s := holdsSecret(cmd...); s != "" {
			t.Errorf("%s is on the command line: %q", s, cmd)
		}
		i := slices.Index(cmd, flag)
		if i < 0 || i+1 >= len(cmd) {
			t.Fatalf("no %s in %q", flag, cmd)
		}
		props := privateFile(t, cmd[i+1])
		for _, want := range []string{"security.protocol=SASL_SSL\n", "sasl.mechanism=SCRAM-SHA-512\n",
			`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="suite" password="Kafka-Pw-1\\"\\\\ x";` + "\n",
			"ssl.truststore.type=PEM\n", "ssl.truststore.location=" + r.Cfg.Get(kafkadriver.SettingCAFile) + "\n", "ssl.keystore.type=PEM\n"} {
			if !strings.Contains(props, want) {
				t.Errorf("the client properties lack %q:\n%s", want, props)
			}
		}
		// The client certificate as Kafka reads a PEM key store: the key
		// (unencrypted PKCS#8), then the chain.
		_, ks, _ := strings.Cut(props, "ssl.keystore.location=")
		ks, _, _ = strings.Cut(ks, "\n")
		if text := privateFile(t, ks); !strings.HasPrefix(text, "-----BEGIN PRIVATE KEY-----") || !strings.Contains(text, "-----BEGIN CERTIFICATE-----") {
			t.Errorf("the key store %s:\n%s", ks, text)
		}
	}
	if got := kafkaClientProps(config.Default(), ""); got != "" {
		t.Errorf("the plain cluster gets client properties:\n%s", got)
	}
}

// TestPerfTestVerifiesTheServerAndGetsItsURIFromTheEnvironment: PerfTest
// gets the URI, password included, from its environment, never on its
// command line, and for amqps:// the JVM's default TLS context made from
// the URL's CA and client certificate (PKCS#12 stores), not its own
// context that trusts every server certificate.
func TestPerfTestVerifiesTheServerAndGetsItsURIFromTheEnvironment(t *testing.T) {
	r, ca := secureRunner(t)
	cmd, env, err := r.perfTestCmd("--producers", "1")
	if err != nil {
		t.Fatal(err)
	}
	if s := holdsSecret(cmd...); s != "" || slices.Contains(cmd, "--uri") {
		t.Errorf("the URI or %s is on the command line: %q", s, cmd)
	}
	if !slices.Contains(cmd, "--use-default-ssl-context") {
		t.Errorf("PerfTest keeps its own TLS context, which trusts every certificate: %q", cmd)
	}
	envs := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envs[k] = v
	}
	uri := envs[envs["RABBITMQ_PERF_TEST_ENV_PREFIX"]+"_URI"]
	if u, err := url.Parse(uri); err != nil || u.Scheme != "amqps" || u.Query().Has("cacertfile") {
		t.Errorf("PerfTest's URI %q (prefix %q): want the amqps URI without amqp091's TLS parameters", uri, envs["RABBITMQ_PERF_TEST_ENV_PREFIX"])
	} else if pw, _ := u.User.Password(); pw != rabbitPassword {
		t.Errorf("PerfTest's URI carries password %q", pw)
	}
	props := map[string]string{}
	for _, a := range cmd {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "-D"), "="); ok && strings.HasPrefix(a, "-Djavax.net.ssl.") {
			props[k] = v
		}
	}
	trust, err := pkcs12.DecodeTrustStore([]byte(privateFile(t, props["javax.net.ssl.trustStore"])), props["javax.net.ssl.trustStorePassword"])
	if err != nil || len(trust) != 1 || !trust[0].Equal(ca) {
		t.Errorf("the trust store holds %d certificates (%v), want the CA", len(trust), err)
	}
	_, leaf, _, err := pkcs12.DecodeChain([]byte(privateFile(t, props["javax.net.ssl.keyStore"])), props["javax.net.ssl.keyStorePassword"])
	if err != nil || leaf.Subject.CommonName != "inboxbench client" {
		t.Errorf("the key store: %v, %v", leaf, err)
	}
	if props["javax.net.ssl.trustStoreType"] != "PKCS12" || props["javax.net.ssl.keyStoreType"] != "PKCS12" {
		t.Errorf("store types: %v", props)
	}
	// The store passwords are secrets too: masked in what is recorded.
	if rec := strings.Join(r.redactArgs(cmd), " "); strings.Contains(rec, props["javax.net.ssl.keyStorePassword"]) {
		t.Errorf("the recorded command shows the key store password: %s", rec)
	}
}

// TestRocketMQToolsSignWithTheKeyPair: the benchmark classes get the
// configured key pair as their ACL options (they read it from their
// arguments only; runTool keeps those off the command line).
func TestRocketMQToolsSignWithTheKeyPair(t *testing.T) {
	r, _ := secureRunner(t)
	cmd, err := r.rocketCmd("Consumer", "-t", "x")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(cmd, "-a"); i < 0 || strings.Join(cmd[i:], " ") != "-a true --accessKey=suite --secretKey="+rocketSecret {
		t.Errorf("the benchmark consumer does not sign: %q", cmd)
	}
	// TLS: on, the server verified against the CA (the client's test
	// mode, its default, trusts any certificate), the client's key as
	// PKCS#8.
	for _, want := range []string{"-Dtls.enable=true", "-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true",
		"-Dtls.client.trustCertPath=" + r.Cfg.Get(rocketdriver.SettingCAFile), "-Dtls.client.certPath=" + r.Cfg.Get(rocketdriver.SettingCertFile)} {
		if !slices.Contains(cmd, want) {
			t.Errorf("the benchmark consumer lacks %s: %q", want, cmd)
		}
	}
	for _, a := range cmd {
		if k, ok := strings.CutPrefix(a, "-Dtls.client.keyPath="); ok && !strings.HasPrefix(privateFile(t, k), "-----BEGIN PRIVATE KEY-----") {
			t.Errorf("the client key %s is not PKCS#8", k)
		}
	}
	if got := rocketACL(config.Default()); got != nil {
		t.Errorf("ACL options without a key pair: %q", got)
	}
}

// TestToolsRunWithoutSecretsOnTheirCommandLine runs a stand-in for java
// that records what it was started with, prints the secrets and fails:
// the process's own arguments are one @file (0600, gone afterwards) that
// holds the command line; the log (0600, in a 0700 directory) and the
// error with the log's tail show no secret; the arguments reach a real
// java launcher intact, quotes, spaces and backslashes included.
func TestToolsRunWithoutSecretsOnTheirCommandLine(t *testing.T) {
	r, _ := secureRunner(t)
	dir := t.TempDir()
	r.java = filepath.Join(dir, "java")
	script := `#!/bin/sh
printf '%s\n' "$@" > "$OUT/argv"
f="${1#@}"; cp "$f" "$OUT/argfile"; stat -c %a "$f" > "$OUT/mode"; echo "$f" > "$OUT/path"
echo "connecting with $INBOXBENCH_PERFTEST_URI"
echo "sk=` + rocketSecret + ` kafka=$KPW" >&2
exit 3
`
	if err := os.WriteFile(r.java, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUT", dir)
	t.Setenv("KPW", kafkaPassword)
	cmd, err := r.rocketCmd("Producer", "-t", "x", "-p", `a "b\c`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.runTool(context.Background(), toolRun{name: "rocketmq-producer", args: cmd[1:], timeout: time.Minute,
		env: []string{"INBOXBENCH_PERFTEST_URI=" + "amqps://suite:" + url.QueryEscape(rabbitPassword) + "@h/v"}})
	if err == nil {
		t.Fatal("the tool exited 3: want an error")
	}
	read := func(name string) string { b, _ := os.ReadFile(filepath.Join(dir, name)); return string(b) }
	if argv := strings.Split(strings.TrimSpace(read("argv")), "\n"); len(argv) != 1 || !strings.HasPrefix(argv[0], "@") {
		t.Errorf("the tool was started with %q, want one @file", argv)
	}
	if !strings.Contains(read("argfile"), `"--secretKey=`+rocketSecret+`"`) || strings.TrimSpace(read("mode")) != "600" {
		t.Errorf("the argument file (mode %s) does not hold the command line:\n%s", read("mode"), read("argfile"))
	}
	if _, err := os.Stat(strings.TrimSpace(read("path"))); !os.IsNotExist(err) {
		t.Errorf("the argument file is left behind: %v", err)
	}
	log := privateFile(t, filepath.Join(r.logDir, "rocketmq-producer.log"))
	if s := holdsSecret(log, err.Error()); s != "" {
		t.Errorf("%s is in the log or the error:\n%s\n%v", s, log, err)
	}
	if !strings.HasPrefix(log, "$ INBOXBENCH_PERFTEST_URI=amqps://suite:***@h/v "+r.java+" -Drocketmq.client.logRoot=") || !strings.Contains(log, "--secretKey=***") {
		t.Errorf("the log does not start with the masked command line:\n%s", log)
	}

	// The argument file through the real launcher: a system property
	// with every character the quoting handles comes back intact.
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("java (the stack's JVM services and the vendor tools need it): %v", err)
	}
	tricky := `a "b\c #d $e @f %g'h` + "\t" + `i`
	args := filepath.Join(dir, "args")
	if err := os.WriteFile(args, []byte(compose.JavaArgFileText([]string{"-Dinboxbench.x=" + tricky, "-XshowSettings:properties", "-version"})), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(java, "@"+args).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "inboxbench.x = "+tricky+"\n") {
		t.Errorf("java @file: %v; the property came back as:\n%s", err, grepLine(string(out), "inboxbench.x"))
	}
}

func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return "(missing)"
}

// TestPerfTestTakesTheDriversTLSSettings: with the rabbitmq TLS settings
// (which win over amqp091's URL parameters, as in the driver), PerfTest
// gets their CA and client certificate, the server name (SNI), and
// EXTERNAL when the driver logs in with the certificate.
func TestPerfTestTakesTheDriversTLSSettings(t *testing.T) {
	r, urlCA := secureRunner(t)
	caFile, certFile, keyFile, ca := pemFiles(t, t.TempDir())
	r.Cfg = r.Cfg.With(rabbitdriver.SettingURL, "amqps://suite:"+url.QueryEscape(rabbitPassword)+"@127.0.0.1:57671/inboxbench").
		With(rabbitdriver.SettingCAFile, caFile).With(rabbitdriver.SettingCertFile, certFile).With(rabbitdriver.SettingKeyFile, keyFile).
		With(rabbitdriver.SettingServerName, "localhost").With(rabbitdriver.SettingSASL, "external")
	if err := r.Cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cmd, _, err := r.perfTestCmd()
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(cmd, "--server-name-indication"); i < 0 || cmd[i+1] != "localhost" || !slices.Contains(cmd, "--sasl-external") {
		t.Errorf("PerfTest lacks the server name or EXTERNAL: %q", cmd)
	}
	props := map[string]string{}
	for _, a := range cmd {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "-D"), "="); ok && strings.HasPrefix(a, "-Djavax.net.ssl.") {
			props[k] = v
		}
	}
	trust, err := pkcs12.DecodeTrustStore([]byte(privateFile(t, props["javax.net.ssl.trustStore"])), props["javax.net.ssl.trustStorePassword"])
	if err != nil || len(trust) != 1 || !trust[0].Equal(ca) || trust[0].Equal(urlCA) {
		t.Errorf("the trust store holds %d certificates (%v): want the rabbitmq.ca-file one", len(trust), err)
	}
}
