package rabbitmq

import (
	"errors"
	"strings"

	"github.com/inboxbench/inboxbench/config"
)

// DefaultURL is the local stack's RabbitMQ: vhost, user and port 55672 are
// contracts of `bench stack` and compose/docker-compose.yml.
const DefaultURL = "amqp://inboxbench:inboxbench@127.0.0.1:55672/inboxbench"

// SettingURL is the driver's one setting (flag, INBOXBENCH_* variable).
var SettingURL = config.Register(config.Setting{Key: "rabbitmq.url", Flag: "rabbitmq-url", Env: "INBOXBENCH_RABBITMQ_URL",
	Default: DefaultURL, Usage: "RabbitMQ AMQP URL (amqp:// or amqps://, with vhost and credentials)", Check: checkURL})

func checkURL(v string) error {
	if !strings.HasPrefix(v, "amqp://") && !strings.HasPrefix(v, "amqps://") {
		return errors.New("must start with amqp:// or amqps://")
	}
	return nil
}
