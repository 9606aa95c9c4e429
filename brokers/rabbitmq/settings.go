package rabbitmq

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/config"
)

// DefaultURL is the local stack's RabbitMQ: vhost, user and port 55672 are
// contracts of `bench stack` and compose/docker-compose.yml.
const DefaultURL = "amqp://inboxbench:inboxbench@127.0.0.1:55672/inboxbench"

// SettingURL is the driver's one setting (flag, INBOXBENCH_* variable).
var SettingURL = config.Register(config.Setting{Key: "rabbitmq.url", Flag: "rabbitmq-url", Env: "INBOXBENCH_RABBITMQ_URL",
	Default: DefaultURL, Usage: "RabbitMQ AMQP URL (amqp:// or amqps://, with vhost and credentials)", Check: checkURL})

func init() { config.RegisterRule(plaintextRule) }

func checkURL(v string) error {
	_, err := ParseURL(v)
	return err
}

// ParseURL reads an AMQP URL as amqp091 does (its defaults: port 5672 for
// amqp://, 5671 for amqps://), but its error never holds the URL nor a
// piece of it: net/url's errors quote the whole URL, password included,
// or the bad escape inside the password, and amqp091 passes them on.
func ParseURL(raw string) (amqp.URI, error) {
	if !strings.HasPrefix(raw, "amqp://") && !strings.HasPrefix(raw, "amqps://") {
		// amqp091 takes "amqp:/user:pass@host" for a vhost on localhost.
		return amqp.URI{}, errors.New("must start with amqp:// or amqps://")
	}
	u, err := amqp.ParseURI(raw)
	if err == nil {
		return u, nil
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		return u, err // the scheme, a space, a port or a query parameter: no credential in it
	}
	if _, perr := url.Parse(withoutUserinfo(raw)); perr != nil {
		return u, errors.New("not a valid URL: check the host, port and vhost (percent-encode reserved characters)")
	}
	return u, errors.New("the user or password is not valid in a URL: percent-encode its reserved characters (% as %25, @ as %40, : as %3A, / as %2F, ? as %3F, # as %23)")
}

// withoutUserinfo is raw with the user and password before the host's
// '@' taken out.
func withoutUserinfo(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	end := len(rest)
	if q := strings.IndexAny(rest, "/?#"); q >= 0 {
		end = q
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		return raw[:i+3] + rest[at+1:]
	}
	return raw
}

// Addr is the host:port the URL reaches, the scheme's default port
// filled in (5671 for amqps://); "" when the URL does not parse.
func Addr(raw string) string {
	u, err := ParseURL(raw)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
}

// plaintextRule refuses a password that AMQP PLAIN would send in clear:
// an amqp:// URL (no TLS) with a password, to a host other than this one,
// unless the user allowed it.
func plaintextRule(c config.Config) error {
	raw := c.Get(SettingURL)
	u, err := ParseURL(raw)
	if err != nil || u.Scheme != "amqp" {
		return nil
	}
	pu, err := url.Parse(raw)
	if err != nil || pu.User == nil {
		return nil
	}
	if _, has := pu.User.Password(); !has {
		return nil
	}
	for _, m := range u.AuthMechanism {
		if strings.EqualFold(m, "external") {
			return nil
		}
	}
	addr := net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
	if c.PlaintextPasswordAllowed([]string{addr}) {
		return nil
	}
	return config.Invalid(SettingURL, nil, "an amqp:// URL sends its password in clear (AMQP PLAIN without TLS) to %s: use amqps://, or allow it with %s", addr, config.SettingAllowPlaintextPasswords)
}
