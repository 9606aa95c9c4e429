package rabbitmq

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
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
	SettingURL = driverutil.Setting(Name, "url", config.Setting{Default: DefaultURL, Check: checkURL,
		Usage: "RabbitMQ AMQP URL (amqp:// or amqps:// for TLS, with vhost and credentials); the nodes of one cluster as several URLs, comma separated: the driver connects to one and moves to another when it is lost"})
	SettingSASL = driverutil.Setting(Name, "sasl", config.Setting{Check: checkSASL,
		Usage: "RabbitMQ SASL mechanism: plain (the URL's user and password; default) or external (the client certificate's identity)"})
	SettingCAFile     = tlsKeys.CA
	SettingCertFile   = tlsKeys.Cert
	SettingKeyFile    = tlsKeys.Key
	SettingServerName = tlsKeys.ServerName
)

// tlsKeys are the driver's TLS settings; there is no TLS switch: the URL's
// scheme is.
var tlsKeys = driverutil.RegisterTLS(Name, SettingURL, driverutil.TLSUsage{
	CA:         "PEM file of CA certificates for RabbitMQ TLS (amqps://; default: system roots)",
	Cert:       "PEM client certificate for RabbitMQ TLS (with rabbitmq.key-file), for nodes that verify their peers",
	Key:        "PEM private key of the RabbitMQ client certificate",
	ServerName: "name the RabbitMQ node's certificate must hold (default: the URL's host)",
})

// SASL mechanisms.
const (
	SASLPlain    = "plain"
	SASLExternal = "external"
)

func init() {
	config.RegisterCheck(checkTogether)
	config.RegisterCheck(plaintextRule)
}

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

// URLs splits a rabbitmq.url value into its URLs: at the commas that
// begin another amqp:// or amqps:// URL, so a comma inside a URL (in a
// password) stays where it is.
func URLs(v string) []string {
	var out []string
	for _, part := range strings.Split(v, ",") {
		p := strings.TrimSpace(part)
		if len(out) > 0 && !hasScheme(p) {
			out[len(out)-1] += "," + part
			continue
		}
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

func hasScheme(u string) bool {
	return strings.HasPrefix(u, "amqp://") || strings.HasPrefix(u, "amqps://")
}

// checkURL accepts one URL or several (the nodes of one cluster), each a
// valid AMQP URI (ParseURL: an error holds no piece of the URL's
// credentials), several differing only in host and port.
func checkURL(v string) error {
	urls := URLs(v)
	if len(urls) == 0 {
		return errors.New("no URL: give amqp://user:password@host:port/vhost")
	}
	var first amqp.URI
	for i, u := range urls {
		uri, err := ParseURL(u)
		if err != nil {
			if len(urls) > 1 {
				return fmt.Errorf("URL %d of %d: %v", i+1, len(urls), err)
			}
			return err
		}
		if i == 0 {
			first = uri
			continue
		}
		if uri.Vhost != first.Vhost || uri.Username != first.Username || uri.Password != first.Password || uri.Scheme != first.Scheme {
			return fmt.Errorf("URL %d of %d (%s) differs from the first in its scheme, user, password or vhost: several URLs are the nodes of one cluster, the same but for host and port", i+1, len(urls), config.Redact(u))
		}
	}
	return nil
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
// filled in (5671 for amqps://), each of several URLs' comma separated;
// "" when a URL does not parse.
func Addr(raw string) string {
	var out []string
	for _, one := range URLs(raw) {
		u, err := ParseURL(one)
		if err != nil {
			return ""
		}
		out = append(out, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	}
	return strings.Join(out, ",")
}

// plaintextRule refuses a password that AMQP PLAIN would send in clear:
// an amqp:// URL (no TLS) with a password, to a host other than this one,
// unless the user allowed it.
func plaintextRule(c config.Config) error {
	for _, raw := range URLs(c.Get(SettingURL)) {
		if err := plaintextRuleOne(c, raw); err != nil {
			return err
		}
	}
	return nil
}

// plaintextRuleOne is plaintextRule for one of the URLs.
func plaintextRuleOne(c config.Config, raw string) error {
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
	if strings.EqualFold(c.Get(SettingSASL), SASLExternal) {
		return nil // the certificate's identity, no password
	}
	for _, m := range u.AuthMechanism {
		if strings.EqualFold(m, SASLExternal) {
			return nil
		}
	}
	addr := net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
	if c.PlaintextPasswordAllowed([]string{addr}) {
		return nil
	}
	return config.Invalid(SettingURL, nil, "an amqp:// URL sends its password in clear (AMQP PLAIN without TLS) to %s: use amqps://, or allow it with %s", addr, config.SettingAllowPlaintextPasswords)
}

func checkSASL(v string) error {
	switch strings.ToLower(v) {
	case SASLPlain, SASLExternal:
		return nil
	}
	return fmt.Errorf("not supported: use %s or %s", SASLPlain, SASLExternal)
}

// Queue types (SettingQueueType).
const (
	QueueQuorum  = "quorum"
	QueueClassic = "classic"
)

// The shard queues' kind and how publishes are sent: the safe defaults
// (replicated quorum queues, mandatory publishes), and the weak setting a
// failover control runs with (compose's RabbitMQ cluster, WeakSetting).
var (
	SettingQueueType = driverutil.Setting(Name, "queue-type", config.Setting{Default: QueueQuorum, Check: checkQueueType,
		Usage: "the shard queues the driver declares: quorum (replicated, Raft; the default) or classic (durable, on the one node that declared it, not replicated)"})
	SettingQuorumSize = driverutil.Setting(Name, "quorum-size", config.Setting{Check: checkQuorumSize,
		Usage: "members of each quorum queue (x-quorum-initial-group-size), declared and verified by the driver; empty: the cluster's default (quorum_cluster_size, 3, capped at its nodes)"})
	SettingMandatory = driverutil.Setting(Name, "mandatory", config.Setting{Kind: config.Bool, Default: "true",
		Usage: "publish with the mandatory flag (the default): a message no queue takes is returned and fails; without it RabbitMQ confirms and drops it (a classic queue whose node is down)"})
)

func checkQueueType(v string) error {
	if v == QueueQuorum || v == QueueClassic {
		return nil
	}
	return fmt.Errorf("use %s or %s", QueueQuorum, QueueClassic)
}

func checkQuorumSize(v string) error {
	if n, err := strconv.Atoi(v); err != nil || n < 1 {
		return fmt.Errorf("want a number of members, at least 1")
	}
	return nil
}
