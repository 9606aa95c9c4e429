package rabbitmq

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/compose"
)

// Secure is the secure variant's RabbitMQ: a node of its own
// (inboxbench-secure@localhost; Service runs it) whose only AMQP
// listener is TLS (no plaintext listener at all), verifying its peers:
// verify_peer with fail_if_no_peer_cert, so a client must present a
// certificate signed by the stack's CA, and then log in. Logins are PLAIN
// over that TLS with a generated password, or EXTERNAL (the
// rabbitmq_auth_mechanism_ssl plugin: the certificate's common name is
// the user). The suite's user has no management tags, only permissions
// on its vhost.
type Secure struct{ Service }

const (
	secureRabbitPort = 57671
	secureRabbitDist = 57673
	secureRabbitNode = "inboxbench-secure@localhost"
	// passwordName is the suite's user's password in the secure stack's
	// credentials.
	passwordName = "rabbitmq_password"
)

// newSecure is the secure stack's node.
func newSecure() *Secure {
	s := &Secure{}
	s.inst = &rabbitInstance{node: secureRabbitNode, port: secureRabbitPort, dist: secureRabbitDist, what: "AMQPS",
		conf: secureRabbitConf, plugins: "[rabbitmq_auth_mechanism_ssl].\n",
		defs: func(e *compose.Env) (string, error) {
			c, err := compose.ReadCredentials(e)
			if err != nil {
				return "", err
			}
			return rabbitDefinitions(c[passwordName], []string{})
		}}
	return s
}

// PasswordNames implements compose.Passworder: the suite's user's.
func (*Secure) PasswordNames() []string { return []string{passwordName} }

// secureRabbitConf is rabbitmq.conf's listener section: TLS only, peers
// verified, TLS 1.2 and 1.3.
func secureRabbitConf(e *compose.Env) (string, error) {
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
`, secureRabbitPort, compose.TLSPath(e, "ca.crt"), compose.TLSPath(e, "rabbitmq.crt"), compose.TLSPath(e, "rabbitmq.key")), nil
}

// Endpoints implements compose.Endpointer: the amqps:// URL with the password,
// the CA, the client certificate and key, the server name, PLAIN.
func (r *Secure) Endpoints(e *compose.Env) (map[string]string, error) {
	c, err := compose.ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	return r.endpoints(e, url.UserPassword(rabbitUser, c[passwordName])), nil
}

// Addresses implements compose.Addresser: the endpoints without the
// password.
func (r *Secure) Addresses(e *compose.Env) map[string]string {
	return r.endpoints(e, url.User(rabbitUser))
}

func (r *Secure) endpoints(e *compose.Env, user *url.Userinfo) map[string]string {
	u := url.URL{Scheme: "amqps", User: user, Host: "127.0.0.1:" + strconv.Itoa(secureRabbitPort), Path: "/" + rabbitVhost}
	return map[string]string{
		rabbitmqbroker.SettingURL:        u.String(),
		rabbitmqbroker.SettingCAFile:     compose.TLSPath(e, "ca.crt"),
		rabbitmqbroker.SettingCertFile:   compose.TLSPath(e, "client.crt"),
		rabbitmqbroker.SettingKeyFile:    compose.TLSPath(e, "client.key"),
		rabbitmqbroker.SettingServerName: "localhost",
		rabbitmqbroker.SettingSASL:       rabbitmqbroker.SASLPlain,
	}
}

// Start makes the node's certificate and password, then starts it.
func (r *Secure) Start(ctx context.Context, e *compose.Env) error {
	if _, err := compose.EnsureSecrets(e, "rabbitmq"); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	return r.Service.Start(ctx, e)
}

// Ready opens an AMQPS connection and a channel with the endpoints.
func (r *Secure) Ready(ctx context.Context, e *compose.Env) (string, error) {
	return compose.SecureReady(ctx, e, r.Service.Ready, ", TLS with client certificates")
}
