package rabbitmq

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// DialConfig is the amqp091 configuration cfg asks for besides the URL:
// the TLS files (when the URL is amqps:// and any rabbitmq TLS setting is
// given; else amqp091 reads its URL parameters or the system roots), the
// SASL mechanism, and a bound on connecting and the AMQP handshake.
func DialConfig(cfg config.Config, timeout time.Duration) (amqp.Config, error) {
	ac := amqp.Config{Dial: amqp.DefaultDial(timeout), Heartbeat: 10 * time.Second}
	if strings.HasPrefix(cfg.Get(SettingURL), "amqps://") && tlsKeys.Given(cfg) {
		tc, err := tlsfiles.Config(cfg, tlsKeys)
		if err != nil {
			return ac, err
		}
		ac.TLSClientConfig = tc
	}
	if strings.EqualFold(cfg.Get(SettingSASL), SASLExternal) {
		ac.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	}
	return ac, nil
}

// TLSFiles are the CA file, client certificate, key and server name an
// amqps:// connection of cfg uses, as DialConfig chooses them: the
// settings when any of them is given, else amqp091's URL parameters
// (cacertfile, certfile, keyfile, server_name_indication). For a program
// that gives RabbitMQ's own tools the same (calibrate).
func TLSFiles(cfg config.Config) (ca, cert, key, serverName string) {
	if tlsKeys.Given(cfg) {
		return cfg.Get(SettingCAFile), cfg.Get(SettingCertFile), cfg.Get(SettingKeyFile), cfg.Get(SettingServerName)
	}
	u, err := ParseURL(cfg.Get(SettingURL))
	if err != nil {
		return "", "", "", ""
	}
	return u.CACertFile, u.CertFile, u.KeyFile, u.ServerName
}

// Dial opens a connection as cfg says, named name on the node (its
// connection_name), within timeout; what the node refuses is explained
// (Explain).
func Dial(cfg config.Config, name string, timeout time.Duration) (*amqp.Connection, error) {
	ac, err := DialConfig(cfg, timeout)
	if err != nil {
		return nil, err
	}
	ac.Properties = amqp.Table{"connection_name": name}
	// amqp091 would return a URL that does not parse in its error, with
	// the password; ParseURL's error holds neither.
	if _, err := ParseURL(cfg.Get(SettingURL)); err != nil {
		return nil, config.Invalid(SettingURL, nil, "%v", err)
	}
	conn, err := amqp.DialConfig(cfg.Get(SettingURL), ac)
	if err != nil {
		return nil, Explain(cfg, err)
	}
	return conn, nil
}

// Explain turns what amqp091 returns when the node refuses cfg's
// connection settings (TLS, credentials, permissions) into an error
// naming the setting to change and what to do, keeping the node's words;
// any other error comes back unchanged.
func Explain(cfg config.Config, err error) error {
	if err == nil {
		return nil
	}
	var se *config.SettingError
	if errors.As(err, &se) {
		return err // explained already
	}
	if e := tlsfiles.Explain(err, cfg, tlsKeys); e != err {
		return e
	}
	raw := cfg.Get(SettingURL)
	user, vhost := "guest", "/"
	if u, perr := url.Parse(raw); perr == nil {
		if u.User != nil {
			user = u.User.Username()
		}
		if v := strings.TrimPrefix(u.Path, "/"); v != "" {
			vhost, _ = url.PathUnescape(v)
		}
	}
	var ae *amqp.Error
	isAMQP := errors.As(err, &ae)
	switch {
	case errors.Is(err, amqp.ErrSASL):
		return config.Invalid(SettingSASL, nil, "the node offers none of the mechanisms the client tried (%v): use one its auth_mechanisms enable (plain, or external with the rabbitmq_auth_mechanism_ssl plugin)", err)
	case isAMQP && ae.Code == amqp.AccessRefused && (errors.Is(err, amqp.ErrCredentials) || strings.Contains(ae.Reason, "Login was refused")):
		if strings.EqualFold(cfg.Get(SettingSASL), SASLExternal) {
			return config.Invalid(SettingCertFile, nil, "the node refused the login of the client certificate's identity (%v): create that user on the node, or use plain", err)
		}
		return config.Invalid(SettingURL, nil, "the node refused the login of user %q (%v): check the user and password in the URL", user, err)
	case isAMQP && (ae.Code == amqp.NotAllowed || errors.Is(err, amqp.ErrVhost)):
		return config.Invalid(SettingURL, nil, "user %q may not open vhost %q (%v): grant it permissions there (rabbitmqctl set_permissions -p VHOST USER '.*' '.*' '.*'), or use the vhost it has", user, vhost, err)
	case isAMQP && ae.Code == amqp.AccessRefused:
		return config.Invalid(SettingURL, nil, "user %q lacks a permission on vhost %q (%v): the suite declares, writes and reads its own queues, so grant it configure, write and read there", user, vhost, err)
	case !strings.HasPrefix(raw, "amqps://") && notAMQP(err):
		return config.Invalid(SettingURL, nil, "the server did not answer the AMQP handshake as AMQP (%v): a TLS listener answers a plaintext client so; use amqps:// (with %s)", err, SettingCAFile)
	}
	return err
}

// notAMQP reports an error from a server that did not speak AMQP during
// the handshake: it hung up (end of file, a reset), or sent what does not
// parse as an AMQP frame (a TLS alert record, as a TLS listener answers
// a plaintext client with).
func notAMQP(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.FrameError
}

// errorf is fmt.Errorf with the errors among args explained against cfg.
func errorf(cfg config.Config, format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = Explain(cfg, err)
		}
	}
	return fmt.Errorf(format, args...)
}
