package calibrate

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	pkcs12 "software.sslmate.com/src/go-pkcs12"

	kafkadriver "github.com/inboxbench/inboxbench/brokers/kafka"
	rabbitdriver "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	rocketdriver "github.com/inboxbench/inboxbench/brokers/rocketmq"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

// The vendor tools against a secured cluster (docs/calibration.md,
// "Secured clusters"): each gets the credentials and trust the driver
// has, the way the tool takes them, and never on a command line: Kafka's
// tools a client properties file, PerfTest its URI in the environment and
// PKCS#12 stores for amqps://, RocketMQ's benchmark classes their ACL
// options inside the argument file runTool starts java with. Every file
// holding a secret is mode 0600 in a directory of mode 0700 that exists
// for one broker's calibration and is removed after it.

// private returns the runner's private directory, made on first use.
func (r *runner) private() (string, error) {
	if r.privDir != "" {
		return r.privDir, nil
	}
	d, err := os.MkdirTemp("", "inboxbench-calibrate-*") // mode 0700
	if err != nil {
		return "", err
	}
	r.privDir = d
	return d, nil
}

// removePrivate removes the private directory and what it holds.
func (r *runner) removePrivate() {
	if r.privDir != "" {
		_ = os.RemoveAll(r.privDir)
		r.privDir = ""
	}
}

// writePrivate writes a file of mode 0600 into the private directory.
func (r *runner) writePrivate(name string, data []byte) (string, error) {
	d, err := r.private()
	if err != nil {
		return "", err
	}
	p := filepath.Join(d, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return "", err
	}
	return p, nil
}

// argfile writes args as the java launcher's argument file
// (compose.WriteJavaArgFile) into the private directory.
func (r *runner) argfile(name string, args []string) (string, error) {
	d, err := r.private()
	if err != nil {
		return "", err
	}
	p := filepath.Join(d, name+".args")
	return p, compose.WriteJavaArgFile(p, args)
}

// redact masks every secret of the configuration, and those the runner
// made (key store passwords), in text a tool printed or an error holds.
func (r *runner) redact(s string) string {
	s = r.Cfg.RedactSecrets(s)
	for _, x := range r.secrets {
		s = strings.ReplaceAll(s, x, "***")
	}
	return s
}

// redactArgs is a command line as calibrate.json and the logs record it.
func (r *runner) redactArgs(args []string) []string {
	out := r.Cfg.RedactSecretArgs(args)
	for i := range out {
		out[i] = r.redact(out[i])
	}
	return out
}

// newSecret returns a random password for a file the runner makes (a key
// store), masked wherever it could show.
func (r *runner) newSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := hex.EncodeToString(b[:])
	r.secrets = append(r.secrets, s)
	return s
}

// --- Kafka -------------------------------------------------------------

// kafkaClientProps is what Kafka's tools need beyond bootstrap.servers to
// reach the cluster in cfg, as a properties file: the security protocol,
// the SASL mechanism with its JAAS login, the CA as a PEM trust store and
// the client certificate as a PEM key store (Kafka reads PEM since 2.7).
// keystore is the key store file (keyStore writes it); "" when the
// cluster needs nothing.
func kafkaClientProps(cfg config.Config, keystore string) string {
	tlsOn := kafkadriver.UsesTLS(cfg)
	mech := strings.ToUpper(cfg.Get(kafkadriver.SettingSASL))
	if !tlsOn && mech == "" {
		return ""
	}
	protocol := map[[2]bool]string{{true, true}: "SASL_SSL", {true, false}: "SSL", {false, true}: "SASL_PLAINTEXT"}[[2]bool{tlsOn, mech != ""}]
	props := [][2]string{{"security.protocol", protocol}}
	if mech != "" {
		module := "org.apache.kafka.common.security.scram.ScramLoginModule"
		if mech == "PLAIN" {
			module = "org.apache.kafka.common.security.plain.PlainLoginModule"
		}
		props = append(props, [2]string{"sasl.mechanism", mech}, [2]string{"sasl.jaas.config", fmt.Sprintf("%s required username=%s password=%s;",
			module, jaasQuote(cfg.Get(kafkadriver.SettingUser)), jaasQuote(cfg.Get(kafkadriver.SettingPassword)))})
	}
	if ca := cfg.Get(kafkadriver.SettingCAFile); ca != "" {
		props = append(props, [2]string{"ssl.truststore.type", "PEM"}, [2]string{"ssl.truststore.location", ca})
	}
	if keystore != "" {
		props = append(props, [2]string{"ssl.keystore.type", "PEM"}, [2]string{"ssl.keystore.location", keystore})
	}
	var b strings.Builder
	b.WriteString("# written by inboxbench calibrate for Kafka's tools; removed after the run\n")
	for _, p := range props {
		b.WriteString(p[0] + "=" + propertiesEscape(p[1]) + "\n")
	}
	return b.String()
}

// jaasQuote quotes a JAAS option value: in double quotes, '\\' and '"'
// escaped.
func jaasQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// propertiesEscape escapes a value of a Java properties file.
func propertiesEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "\f", `\f`).Replace(s)
}

// kafkaConfigArgs returns the tool's flag (--producer.config or
// --consumer.config) with the client properties file, nil when the
// cluster needs none.
func (r *runner) kafkaConfigArgs(flag string) ([]string, error) {
	keystore := ""
	if cert, key := r.Cfg.Get(kafkadriver.SettingCertFile), r.Cfg.Get(kafkadriver.SettingKeyFile); cert != "" {
		pemKey, err := r.pemKeyStore("kafka-key.pem", cert, key)
		if err != nil {
			return nil, config.Invalid(kafkadriver.SettingCertFile, cert, "%v", err)
		}
		keystore = pemKey
	}
	props := kafkaClientProps(r.Cfg, keystore)
	if props == "" {
		return nil, nil
	}
	p, err := r.writePrivate("kafka-client.properties", []byte(props))
	if err != nil {
		return nil, err
	}
	return []string{flag, p}, nil
}

// pemKeyStore writes the client certificate and key as one PEM file that
// Java tools read: the key as unencrypted PKCS#8 first, then the
// certificate chain.
func (r *runner) pemKeyStore(name, certFile, keyFile string) (string, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		return "", err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	for _, c := range pair.Certificate {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	return r.writePrivate(name, out)
}

// --- RabbitMQ ----------------------------------------------------------

// perfTestEnvPrefix is where PerfTest looks for its options in the
// environment (RABBITMQ_PERF_TEST_ENV_PREFIX): a prefix of our own, so
// that no stray variable (URI, TIME, RATE …) overrides an option.
const perfTestEnvPrefix = "INBOXBENCH_PERFTEST"

// perfTestTLSParams are amqp091's URL parameters for TLS and SASL, which
// PerfTest's Java client does not read: they become key stores.
var perfTestTLSParams = []string{"cacertfile", "certfile", "keyfile", "server_name_indication", "auth_mechanism"}

// perfTest returns what PerfTest needs to reach the RabbitMQ URL in
// r.Cfg: JVM options (trust and key stores for amqps://), its own flags,
// and its environment (the URI). The URI never goes on a command line.
func (r *runner) perfTest() (jvm, flags, env []string, err error) {
	raw := r.Cfg.Get(rabbitdriver.SettingURL)
	u, err := rabbitdriver.ParseURL(raw)
	if err != nil {
		return nil, nil, nil, config.Invalid(rabbitdriver.SettingURL, nil, "%v", err)
	}
	pu, err := url.Parse(raw)
	if err != nil {
		return nil, nil, nil, config.Invalid(rabbitdriver.SettingURL, nil, "not a valid URL")
	}
	q := pu.Query()
	for _, k := range perfTestTLSParams {
		q.Del(k)
	}
	pu.RawQuery = q.Encode()
	env = []string{"RABBITMQ_PERF_TEST_ENV_PREFIX=" + perfTestEnvPrefix, perfTestEnvPrefix + "_URI=" + pu.String()}
	if strings.EqualFold(r.Cfg.Get(rabbitdriver.SettingSASL), rabbitdriver.SASLExternal) {
		flags = append(flags, "--sasl-external")
	}
	if u.Scheme != "amqps" {
		return nil, flags, env, nil
	}
	// The JVM's default context, made from the stores below (or the JVM's
	// own CA certificates when no CA file is set): without it PerfTest
	// trusts every server certificate.
	flags = append(flags, "--use-default-ssl-context")
	caFile, certFile, keyFile, serverName := rabbitdriver.TLSFiles(r.Cfg)
	if serverName != "" {
		flags = append(flags, "--server-name-indication", serverName)
	}
	if caFile != "" {
		certs, err := readCerts(caFile)
		if err != nil {
			return nil, nil, nil, config.Invalid(rabbitdriver.SettingCAFile, caFile, "%v", err)
		}
		pw := r.newSecret()
		der, err := pkcs12.Modern.EncodeTrustStore(certs, pw)
		if err != nil {
			return nil, nil, nil, err
		}
		p, err := r.writePrivate("perftest-trust.p12", der)
		if err != nil {
			return nil, nil, nil, err
		}
		jvm = append(jvm, "-Djavax.net.ssl.trustStore="+p, "-Djavax.net.ssl.trustStoreType=PKCS12", "-Djavax.net.ssl.trustStorePassword="+pw)
	}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, nil, nil, config.Invalid(rabbitdriver.SettingCertFile, certFile, "with key %s: %v", keyFile, err)
		}
		var chain []*x509.Certificate
		for _, d := range pair.Certificate {
			c, err := x509.ParseCertificate(d)
			if err != nil {
				return nil, nil, nil, config.Invalid(rabbitdriver.SettingCertFile, certFile, "%v", err)
			}
			chain = append(chain, c)
		}
		pw := r.newSecret()
		der, err := pkcs12.Modern.Encode(pair.PrivateKey, chain[0], chain[1:], pw)
		if err != nil {
			return nil, nil, nil, err
		}
		p, err := r.writePrivate("perftest-key.p12", der)
		if err != nil {
			return nil, nil, nil, err
		}
		jvm = append(jvm, "-Djavax.net.ssl.keyStore="+p, "-Djavax.net.ssl.keyStoreType=PKCS12", "-Djavax.net.ssl.keyStorePassword="+pw)
	}
	return jvm, flags, env, nil
}

// readCerts reads every certificate of a PEM file.
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("holds no PEM certificate")
	}
	return out, nil
}

// --- RocketMQ ----------------------------------------------------------

// rocketACL is the benchmark classes' ACL options for the key pair in cfg
// (they sign every request with it, as the driver does); nil without one.
// The keys go as --name=value: commons-cli takes a value that starts with
// '-' after "-sk" for an option, and the tool stops at "Missing
// argument".
func rocketACL(cfg config.Config) []string {
	ak, sk := cfg.Get(rocketdriver.SettingAccessKey), cfg.Get(rocketdriver.SettingSecretKey)
	if ak == "" {
		return nil
	}
	return []string{"-a", "true", "--accessKey=" + ak, "--secretKey=" + sk}
}

// rocketTLS is the JVM options of the RocketMQ client's TLS
// (TlsSystemConfig) for the driver's TLS settings: TLS on, the server's
// certificate verified (the client's test mode, its default, trusts any),
// against the CA file (else the JVM's CA certificates), the client
// certificate and its key as PKCS#8 PEM; a configuration file of our own,
// so that /etc/rocketmq/tls.properties changes nothing. Nil without TLS.
func (r *runner) rocketTLS() ([]string, error) {
	if !rocketdriver.UsesTLS(r.Cfg) {
		return nil, nil
	}
	conf, err := r.writePrivate("rocketmq-tls.properties", []byte("# TLS of RocketMQ's benchmark classes: the -D options of the command line\n"))
	if err != nil {
		return nil, err
	}
	jvm := []string{"-Dtls.enable=true", "-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true", "-Dtls.config.file=" + conf}
	if ca := r.Cfg.Get(rocketdriver.SettingCAFile); ca != "" {
		jvm = append(jvm, "-Dtls.client.trustCertPath="+ca)
	}
	if cert, key := r.Cfg.Get(rocketdriver.SettingCertFile), r.Cfg.Get(rocketdriver.SettingKeyFile); cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, config.Invalid(rocketdriver.SettingCertFile, cert, "with key %s: %v", key, err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
		if err != nil {
			return nil, err
		}
		k, err := r.writePrivate("rocketmq-client-key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
		if err != nil {
			return nil, err
		}
		jvm = append(jvm, "-Dtls.client.certPath="+cert, "-Dtls.client.keyPath="+k)
	}
	return jvm, nil
}
