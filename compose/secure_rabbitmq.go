package compose

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
)

// SecureRabbitMQ is the secure variant's RabbitMQ: a node of its own
// (inboxbench-secure@localhost; rabbitmq.go runs it) whose only AMQP
// listener is TLS (no plaintext listener at all), verifying its peers:
// verify_peer with fail_if_no_peer_cert, so a client must present a
// certificate signed by the stack's CA, and then log in. Logins are PLAIN
// over that TLS with a generated password, or EXTERNAL (the
// rabbitmq_auth_mechanism_ssl plugin: the certificate's common name is
// the user). The suite's user has no management tags, only permissions
// on its vhost.
type SecureRabbitMQ struct{ RabbitMQ }

const (
	secureRabbitPort = 57671
	secureRabbitDist = 57673
	secureRabbitNode = "inboxbench-secure@localhost"
)

func init() {
	s := &SecureRabbitMQ{}
	s.inst = &rabbitInstance{node: secureRabbitNode, port: secureRabbitPort, dist: secureRabbitDist, what: "AMQPS",
		conf: secureRabbitConf, plugins: "[rabbitmq_auth_mechanism_ssl].\n",
		defs: func(e *Env) (string, error) {
			c, err := ReadCredentials(e)
			if err != nil {
				return "", err
			}
			return rabbitDefinitions(c.RabbitMQ, []string{})
		}}
	registerIn(VariantSecure, 2, s)
}

// secureRabbitConf is rabbitmq.conf's listener section: TLS only, peers
// verified, TLS 1.2 and 1.3.
func secureRabbitConf(e *Env) (string, error) {
	return fmt.Sprintf(`listeners.tcp = none
listeners.ssl.1 = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
ssl_options.versions.1 = tlsv1.3
ssl_options.versions.2 = tlsv1.2
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
`, secureRabbitPort, TLSPath(e, "ca.crt"), TLSPath(e, "rabbitmq.crt"), TLSPath(e, "rabbitmq.key")), nil
}

// Endpoints implements Endpointer: the amqps:// URL with the password,
// the CA, the client certificate and key, the server name, PLAIN.
func (r *SecureRabbitMQ) Endpoints(e *Env) (map[string]string, error) {
	c, err := ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	return r.endpoints(e, url.UserPassword(rabbitUser, c.RabbitMQ)), nil
}

// Addresses implements Addresser.
func (r *SecureRabbitMQ) Addresses(e *Env) map[string]string {
	return r.endpoints(e, url.User(rabbitUser))
}

func (r *SecureRabbitMQ) endpoints(e *Env, user *url.Userinfo) map[string]string {
	u := url.URL{Scheme: "amqps", User: user, Host: "127.0.0.1:" + strconv.Itoa(secureRabbitPort), Path: "/" + rabbitVhost}
	return map[string]string{
		rabbitmqbroker.SettingURL:        u.String(),
		rabbitmqbroker.SettingCAFile:     TLSPath(e, "ca.crt"),
		rabbitmqbroker.SettingCertFile:   TLSPath(e, "client.crt"),
		rabbitmqbroker.SettingKeyFile:    TLSPath(e, "client.key"),
		rabbitmqbroker.SettingServerName: "localhost",
		rabbitmqbroker.SettingSASL:       rabbitmqbroker.SASLPlain,
	}
}

func (r *SecureRabbitMQ) Start(ctx context.Context, e *Env) error {
	if _, err := ensureSecrets(e, "rabbitmq"); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	return r.RabbitMQ.Start(ctx, e)
}

func (r *SecureRabbitMQ) Ready(ctx context.Context, e *Env) (string, error) {
	return secureReady(ctx, e, func(ctx context.Context, se *Env) (string, error) {
		v, err := r.RabbitMQ.Ready(ctx, se)
		if err != nil {
			return "", err
		}
		return v + ", TLS with client certificates", nil
	})
}
