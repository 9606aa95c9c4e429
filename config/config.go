// Package config holds the one set of endpoints every inboxbench command uses.
//
// Values come from defaults (the local stack on loopback), then environment
// variables, then command-line flags. Defaults point at the ports that both
// `bench stack up` and compose/docker-compose.yml publish, so nothing needs to
// be set to use the local stack; remote clusters are reached by setting the
// variables below.
package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Local-stack defaults. The ports are contracts (DESIGN.md): scripts, the
// compose file and the tests depend on them.
const (
	DefaultPGURL           = "postgres://inboxbench:inboxbench@127.0.0.1:55432/inboxbench?sslmode=disable"
	DefaultRabbitMQURL     = "amqp://inboxbench:inboxbench@127.0.0.1:55672/inboxbench"
	DefaultKafkaBrokers    = "127.0.0.1:59092"
	DefaultRocketMQNamesrv = "127.0.0.1:59876"
)

// Config is the endpoint configuration shared by every command.
type Config struct {
	// PGURL is a libpq/pgx connection string (URL or key=value). TLS is set
	// with sslmode/sslrootcert as for any libpq client.
	PGURL string
	// RabbitMQURL is an amqp:// or amqps:// URL including vhost and credentials.
	RabbitMQURL string
	// KafkaBrokers are seed brokers (host:port), several allowed.
	KafkaBrokers []string
	// KafkaTLS dials the seeds with TLS (system roots, or KafkaCAFile).
	KafkaTLS    bool
	KafkaCAFile string
	// KafkaSASL is "", "plain", "scram-sha-256" or "scram-sha-512".
	KafkaSASL         string
	KafkaUser         string
	KafkaPassword     string
	RocketMQNamesrv   []string
	RocketMQAccessKey string
	RocketMQSecretKey string
	// StackDir is where `bench stack` keeps data, logs, pid files and the
	// Maven cache of the native (no-Docker) stack.
	StackDir string
}

// envVar documents one environment variable; the table drives both loading
// and the help text so the two cannot drift apart.
type envVar struct {
	name, flag, usage string
	str               *string
	list              *[]string
	boolean           *bool
}

func (c *Config) vars() []envVar {
	return []envVar{
		{name: "INBOXBENCH_PG_URL", flag: "pg-url", usage: "PostgreSQL connection URL", str: &c.PGURL},
		{name: "INBOXBENCH_RABBITMQ_URL", flag: "rabbitmq-url", usage: "RabbitMQ AMQP URL (amqp:// or amqps://, with vhost and credentials)", str: &c.RabbitMQURL},
		{name: "INBOXBENCH_KAFKA_BROKERS", flag: "kafka-brokers", usage: "Kafka seed brokers, comma separated", list: &c.KafkaBrokers},
		{name: "INBOXBENCH_KAFKA_TLS", flag: "kafka-tls", usage: "connect to Kafka with TLS", boolean: &c.KafkaTLS},
		{name: "INBOXBENCH_KAFKA_CA_FILE", flag: "kafka-ca-file", usage: "PEM file of CA certificates for Kafka TLS (default: system roots)", str: &c.KafkaCAFile},
		{name: "INBOXBENCH_KAFKA_SASL", flag: "kafka-sasl", usage: "Kafka SASL mechanism: plain, scram-sha-256 or scram-sha-512 (empty: none)", str: &c.KafkaSASL},
		{name: "INBOXBENCH_KAFKA_USER", flag: "kafka-user", usage: "Kafka SASL user", str: &c.KafkaUser},
		{name: "INBOXBENCH_KAFKA_PASSWORD", flag: "kafka-password", usage: "Kafka SASL password", str: &c.KafkaPassword},
		{name: "INBOXBENCH_ROCKETMQ_NAMESRV", flag: "rocketmq-namesrv", usage: "RocketMQ name servers (host:port), comma separated", list: &c.RocketMQNamesrv},
		{name: "INBOXBENCH_ROCKETMQ_ACCESS_KEY", flag: "rocketmq-access-key", usage: "RocketMQ ACL access key", str: &c.RocketMQAccessKey},
		{name: "INBOXBENCH_ROCKETMQ_SECRET_KEY", flag: "rocketmq-secret-key", usage: "RocketMQ ACL secret key", str: &c.RocketMQSecretKey},
		{name: "INBOXBENCH_STACK_DIR", flag: "stack-dir", usage: "directory of the native local stack (data, logs, Maven cache)", str: &c.StackDir},
	}
}

// Default returns the local-stack configuration.
func Default() Config {
	return Config{
		PGURL:           DefaultPGURL,
		RabbitMQURL:     DefaultRabbitMQURL,
		KafkaBrokers:    splitList(DefaultKafkaBrokers),
		RocketMQNamesrv: splitList(DefaultRocketMQNamesrv),
		StackDir:        ".stack",
	}
}

// FromEnv returns the defaults overridden by INBOXBENCH_* variables.
func FromEnv() (Config, error) {
	c := Default()
	for _, v := range c.vars() {
		val, ok := os.LookupEnv(v.name)
		if !ok {
			continue
		}
		switch {
		case v.str != nil:
			*v.str = val
		case v.list != nil:
			l := splitList(val)
			if len(l) == 0 {
				return c, fmt.Errorf("%s is set but empty: give at least one host:port, or unset it to use the local stack", v.name)
			}
			*v.list = l
		case v.boolean != nil:
			b, err := parseBool(val)
			if err != nil {
				return c, fmt.Errorf("%s=%q: %v", v.name, val, err)
			}
			*v.boolean = b
		}
	}
	return c, c.Validate()
}

// BindFlags registers one flag per setting on fs, defaulting to the current
// values (call after FromEnv so the environment shows up as the default).
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	for _, v := range c.vars() {
		usage := v.usage + " (env " + v.name + ")"
		switch {
		case v.str != nil:
			fs.StringVar(v.str, v.flag, *v.str, usage)
		case v.list != nil:
			fs.StringSliceVar(v.list, v.flag, *v.list, usage)
		case v.boolean != nil:
			fs.BoolVar(v.boolean, v.flag, *v.boolean, usage)
		}
	}
}

// Validate checks values that can be checked without a network.
func (c *Config) Validate() error {
	switch strings.ToLower(c.KafkaSASL) {
	case "", "plain", "scram-sha-256", "scram-sha-512":
	default:
		return fmt.Errorf("kafka SASL mechanism %q is not supported: use plain, scram-sha-256 or scram-sha-512 (INBOXBENCH_KAFKA_SASL / --kafka-sasl)", c.KafkaSASL)
	}
	if !strings.HasPrefix(c.RabbitMQURL, "amqp://") && !strings.HasPrefix(c.RabbitMQURL, "amqps://") {
		return fmt.Errorf("RabbitMQ URL %q must start with amqp:// or amqps:// (INBOXBENCH_RABBITMQ_URL / --rabbitmq-url)", c.RabbitMQURL)
	}
	return nil
}

// EnvHelp lists the environment variables, for --help texts.
func EnvHelp() string {
	var b strings.Builder
	c := Default()
	for _, v := range c.vars() {
		fmt.Fprintf(&b, "  %-32s %s\n", v.name, v.usage)
	}
	return b.String()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off", "":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: use true or false")
}

// Environ returns the configuration as INBOXBENCH_* assignments, for a
// child process (a `bench worker` started by a run) to see exactly the
// settings its parent resolved from flags and environment.
func (c *Config) Environ() []string {
	var out []string
	for _, v := range c.vars() {
		switch {
		case v.str != nil:
			out = append(out, v.name+"="+*v.str)
		case v.list != nil:
			out = append(out, v.name+"="+strings.Join(*v.list, ","))
		case v.boolean != nil:
			out = append(out, v.name+"="+strconv.FormatBool(*v.boolean))
		}
	}
	return out
}

// Redact hides the password of a connection URL, for messages.
func Redact(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.Index(u[i+3:], "@"); j >= 0 {
			creds := u[i+3 : i+3+j]
			if k := strings.Index(creds, ":"); k >= 0 {
				return u[:i+3] + creds[:k] + ":***" + u[i+3+j:]
			}
		}
	}
	return u
}
