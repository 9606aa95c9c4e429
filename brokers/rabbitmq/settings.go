package rabbitmq

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/config"
)

// DefaultURL is the local stack's RabbitMQ: vhost, user and port 55672 are
// contracts of `bench stack` and compose/docker-compose.yml.
const DefaultURL = "amqp://inboxbench:inboxbench@127.0.0.1:55672/inboxbench"

// SettingURL is the driver's one setting (flag, INBOXBENCH_* variable): one
// AMQP URL, or the URLs of several nodes of one cluster, comma separated.
var SettingURL = config.Register(config.Setting{Key: "rabbitmq.url", Flag: "rabbitmq-url", Env: "INBOXBENCH_RABBITMQ_URL",
	Default: DefaultURL, Check: checkURL,
	Usage: "RabbitMQ AMQP URL (amqp:// or amqps://, with vhost and credentials); the nodes of one cluster as several URLs, comma separated: the driver connects to one and moves to another when it is lost"})

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

// checkURL accepts one URL or several, each a valid AMQP URI; several
// must share credentials and vhost (the nodes of one cluster).
func checkURL(v string) error {
	urls := URLs(v)
	if len(urls) == 0 {
		return fmt.Errorf("no URL: give amqp://user:password@host:port/vhost")
	}
	var first amqp.URI
	for i, u := range urls {
		which := "the URL"
		if len(urls) > 1 {
			which = fmt.Sprintf("URL %d of %d (%s)", i+1, len(urls), config.Redact(u))
		}
		if !hasScheme(u) {
			return fmt.Errorf("%s must start with amqp:// or amqps://", which)
		}
		uri, err := amqp.ParseURI(u)
		if err != nil {
			return fmt.Errorf("%s: %v", which, err)
		}
		if i == 0 {
			first = uri
			continue
		}
		if uri.Vhost != first.Vhost || uri.Username != first.Username || uri.Password != first.Password || uri.Scheme != first.Scheme {
			return fmt.Errorf("%s differs from the first in its scheme, user, password or vhost: several URLs are the nodes of one cluster, the same but for host and port", which)
		}
	}
	return nil
}
