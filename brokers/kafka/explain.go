package kafka

import (
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// Explain turns what the client returns when the brokers refuse the
// connection settings of cfg (TLS, SASL, ACLs) into an error naming the
// setting to change and what to do, keeping the client's error in the
// message; any other error comes back unchanged. None of these is retried
// by the client: a command that meets one ends at once.
func Explain(cfg config.Config, err error) error {
	if done, e := driverutil.Explained(cfg, err, tlsKeys); done {
		return e
	}
	user, mech := cfg.Get(SettingUser), cfg.Get(SettingSASL)
	var eof *kgo.ErrFirstReadEOF
	switch {
	case strings.Contains(err.Error(), "plaintext connection speaking to a tls endpoint"):
		return config.Invalid(SettingTLS, nil, "the broker answered with a TLS alert (%v): its listener is TLS, so turn TLS on (with %s)", err, SettingCAFile)
	case errors.As(err, &eof):
		msg := eof.Error()
		switch {
		case strings.Contains(msg, "requires TLS"):
			return config.Invalid(SettingTLS, nil, "the broker closed the connection at the first request without TLS (%v): set it (and %s) for a TLS listener", err, SettingCAFile)
		case strings.Contains(msg, "TLS when the broker is not expecting it"):
			return config.Invalid(SettingTLS, nil, "the broker closed the TLS connection at once (%v): its listener is plaintext, so unset the Kafka TLS settings, or dial its TLS listener", err)
		default:
			return config.Invalid(SettingSASL, nil, "the broker closed the connection at the first request (%v): a SASL listener needs a mechanism, a user and a password", err)
		}
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return config.Invalid(SettingPassword, nil, "the brokers refused the %s login of user %q (%v): check %s and %s", mech, user, err, SettingUser, SettingPassword)
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return config.Invalid(SettingSASL, mech, "the brokers do not take this mechanism (%v): use one their listener enables", err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		who := "the anonymous user"
		if user != "" {
			who = "user " + user
		}
		return config.Invalid(SettingUser, nil, "the brokers refused %s this operation (%v): grant it ACLs for the suite's topics and groups (create, describe, read, write, delete), or use a user that has them", who, err)
	}
	return err
}
