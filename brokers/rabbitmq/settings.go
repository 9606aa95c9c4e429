package rabbitmq

import (
	"fmt"
	"strconv"
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

// Queue types (SettingQueueType).
const (
	QueueQuorum  = "quorum"
	QueueClassic = "classic"
)

// The shard queues' kind and how publishes are sent: the safe defaults
// (replicated quorum queues, mandatory publishes), and the weak setting a
// failover control runs with (compose's RabbitMQ cluster, WeakSetting).
var (
	SettingQueueType = config.Register(config.Setting{Key: "rabbitmq.queue-type", Flag: "rabbitmq-queue-type", Env: "INBOXBENCH_RABBITMQ_QUEUE_TYPE",
		Default: QueueQuorum, Check: checkQueueType,
		Usage: "the shard queues the driver declares: quorum (replicated, Raft; the default) or classic (durable, on the one node that declared it, not replicated)"})
	SettingQuorumSize = config.Register(config.Setting{Key: "rabbitmq.quorum-size", Flag: "rabbitmq-quorum-size", Env: "INBOXBENCH_RABBITMQ_QUORUM_SIZE",
		Check: checkQuorumSize,
		Usage: "members of each quorum queue (x-quorum-initial-group-size), declared and verified by the driver; empty: the cluster's default (quorum_cluster_size, 3, capped at its nodes)"})
	SettingMandatory = config.Register(config.Setting{Key: "rabbitmq.mandatory", Flag: "rabbitmq-mandatory", Env: "INBOXBENCH_RABBITMQ_MANDATORY",
		Kind: config.Bool, Default: "true",
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
