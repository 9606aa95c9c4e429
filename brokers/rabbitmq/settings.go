package rabbitmq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// DefaultURL is the local stack's RabbitMQ: vhost, user and port 55672 are
// contracts of `bench stack` and compose/docker-compose.yml.
const DefaultURL = "amqp://inboxbench:inboxbench@127.0.0.1:55672/inboxbench"

// The driver's settings (flags, INBOXBENCH_* variables). TLS is the URL's
// scheme, amqps://; the files below are its CA, client certificate and
// key (amqp091's own cacertfile, certfile and keyfile URL parameters are
// used only when none of them is set).
var (
	SettingURL = config.Register(config.Setting{Key: "rabbitmq.url", Flag: "rabbitmq-url", Env: "INBOXBENCH_RABBITMQ_URL",
		Default: DefaultURL, Usage: "RabbitMQ AMQP URL (amqp:// or amqps:// for TLS, with vhost and credentials)", Check: checkURL})
	SettingCAFile = config.Register(config.Setting{Key: "rabbitmq.ca-file", Flag: "rabbitmq-ca-file", Env: "INBOXBENCH_RABBITMQ_CA_FILE",
		Usage: "PEM file of CA certificates for RabbitMQ TLS (amqps://; default: system roots)"})
	SettingCertFile = config.Register(config.Setting{Key: "rabbitmq.cert-file", Flag: "rabbitmq-cert-file", Env: "INBOXBENCH_RABBITMQ_CERT_FILE",
		Usage: "PEM client certificate for RabbitMQ TLS (with rabbitmq.key-file), for nodes that verify their peers"})
	SettingKeyFile = config.Register(config.Setting{Key: "rabbitmq.key-file", Flag: "rabbitmq-key-file", Env: "INBOXBENCH_RABBITMQ_KEY_FILE",
		Usage: "PEM private key of the RabbitMQ client certificate"})
	SettingServerName = config.Register(config.Setting{Key: "rabbitmq.server-name", Flag: "rabbitmq-server-name", Env: "INBOXBENCH_RABBITMQ_SERVER_NAME",
		Usage: "name the RabbitMQ node's certificate must hold (default: the URL's host)"})
	SettingSASL = config.Register(config.Setting{Key: "rabbitmq.sasl", Flag: "rabbitmq-sasl", Env: "INBOXBENCH_RABBITMQ_SASL",
		Usage: "RabbitMQ SASL mechanism: plain (the URL's user and password; default) or external (the client certificate's identity)", Check: checkSASL})
)

// SASL mechanisms.
const (
	SASLPlain    = "plain"
	SASLExternal = "external"
)

// tlsKeys are the driver's TLS settings.
var tlsKeys = tlsfiles.Keys{CA: SettingCAFile, Cert: SettingCertFile, Key: SettingKeyFile, ServerName: SettingServerName, Addr: SettingURL}

func init() { config.RegisterCheck(checkTogether) }

// checkTogether refuses TLS files with a plaintext URL (they would be
// ignored) and EXTERNAL without a client certificate to take the identity
// from, then checks the files.
func checkTogether(c config.Config) error {
	amqps := strings.HasPrefix(c.Get(SettingURL), "amqps://")
	if strings.EqualFold(c.Get(SettingSASL), SASLExternal) && (!amqps || c.Get(SettingCertFile) == "") {
		return config.Invalid(SettingSASL, SASLExternal, "takes the identity from the client certificate: use an amqps:// URL and set %s and %s", SettingCertFile, SettingKeyFile)
	}
	if !amqps {
		// Files the user gave with a plaintext URL would be ignored
		// (those of a local stack's variant are, quietly).
		for _, k := range []string{SettingCAFile, SettingCertFile, SettingKeyFile, SettingServerName} {
			if c.Given(k) && c.Get(k) != "" {
				return config.Invalid(k, nil, "set, but %s is amqp:// (plaintext), so it would be ignored: use an amqps:// URL for TLS, or unset it", SettingURL)
			}
		}
		return nil
	}
	return tlsfiles.Check(c, tlsKeys)
}

func checkURL(v string) error {
	if !strings.HasPrefix(v, "amqp://") && !strings.HasPrefix(v, "amqps://") {
		return errors.New("must start with amqp:// or amqps://")
	}
	return nil
}

func checkSASL(v string) error {
	switch strings.ToLower(v) {
	case SASLPlain, SASLExternal:
		return nil
	}
	return fmt.Errorf("not supported: use %s or %s", SASLPlain, SASLExternal)
}
