package compose

import (
	"context"
	"fmt"
	"os"
	"strconv"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
)

// SecureKafka is the secure variant's Kafka (kafka.go runs it): one KRaft
// node whose client listener is SASL_SSL — TLS with the stack CA's
// certificate, client certificates required (ssl.client.auth=required,
// which a SASL_SSL listener takes only with its listener prefix),
// then a SCRAM-SHA-512 (or -256) login. The KRaft controller listens on a
// plaintext loopback port, which only the node itself uses. The SCRAM
// users are created when the storage is formatted: the node's own
// inter-broker login (admin) and the suite's (inboxbench). There is no
// authorizer: any authenticated user may do anything, the suite's user
// included.
type SecureKafka struct{ Kafka }

const (
	secureKafkaBroker     = "127.0.0.1:57092"
	secureKafkaController = "127.0.0.1:57093"
	kafkaAdminUser        = "admin"
	// kafkaSCRAM is the mechanism the suite logs in with; the listener
	// also takes SCRAM-SHA-256.
	kafkaSCRAM = "SCRAM-SHA-512"
)

func init() {
	s := &SecureKafka{}
	s.inst = &kafkaInstance{broker: secureKafkaBroker, controller: secureKafkaController,
		listeners: secureKafkaListeners, format: secureKafkaUsers}
	registerIn(VariantSecure, 3, s)
}

func secureKafkaListeners(e *Env, addr string) (string, error) {
	c, err := ReadCredentials(e)
	if err != nil {
		return "", err
	}
	// Kafka's PEM key store takes the key and the certificate from one
	// file.
	keystore := TLSPath(e, "kafka-keystore.pem")
	key, err := os.ReadFile(TLSPath(e, "kafka.key"))
	if err != nil {
		return "", err
	}
	cert, err := os.ReadFile(TLSPath(e, "kafka.crt"))
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(keystore, append(key, cert...), 0o600); err != nil {
		return "", err
	}
	return fmt.Sprintf(`listeners=SASL_SSL://%[1]s,CONTROLLER://%[2]s
advertised.listeners=SASL_SSL://%[1]s
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=%[3]s
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="%[4]s" password="%[5]s";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="%[4]s" password="%[5]s";
ssl.keystore.type=PEM
ssl.keystore.location=%[6]s
ssl.truststore.type=PEM
ssl.truststore.location=%[7]s
listener.name.sasl_ssl.ssl.client.auth=required
ssl.enabled.protocols=TLSv1.3,TLSv1.2`,
		addr, secureKafkaController, kafkaSCRAM, kafkaAdminUser, c.KafkaAdmin, keystore, TLSPath(e, "ca.crt")), nil
}

// secureKafkaUsers are the storage format's SCRAM users (StorageTool
// --add-scram), both mechanisms for the suite's user.
func secureKafkaUsers(e *Env) ([]string, error) {
	c, err := ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	return []string{
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", kafkaAdminUser, c.KafkaAdmin),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", kafkaAdminUser, c.KafkaAdmin),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", secureUser, c.Kafka),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", secureUser, c.Kafka),
	}, nil
}

// Endpoints implements Endpointer: the SASL_SSL listener, TLS with the CA,
// the client certificate and key and the server name, SCRAM-SHA-512 with
// the suite's user.
func (k *SecureKafka) Endpoints(e *Env) (map[string]string, error) {
	c, err := ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	vals := k.Addresses(e)
	vals[kafkabroker.SettingPassword] = c.Kafka
	return vals, nil
}

// Addresses implements Addresser.
func (k *SecureKafka) Addresses(e *Env) map[string]string {
	return map[string]string{
		kafkabroker.SettingBrokers:    secureKafkaBroker,
		kafkabroker.SettingTLS:        strconv.FormatBool(true),
		kafkabroker.SettingCAFile:     TLSPath(e, "ca.crt"),
		kafkabroker.SettingCertFile:   TLSPath(e, "client.crt"),
		kafkabroker.SettingKeyFile:    TLSPath(e, "client.key"),
		kafkabroker.SettingServerName: "localhost",
		kafkabroker.SettingSASL:       "scram-sha-512",
		kafkabroker.SettingUser:       secureUser,
	}
}

// Ports implements Porter.
func (k *SecureKafka) Ports(e *Env) []Port { return k.Kafka.Ports(bindEnv(e, k)) }

func (k *SecureKafka) Start(ctx context.Context, e *Env) error {
	if _, err := ensureSecrets(e, "kafka"); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return k.Kafka.Start(ctx, bindEnv(e, k))
}

func (k *SecureKafka) Ready(ctx context.Context, e *Env) (string, error) {
	return secureReady(ctx, e, func(ctx context.Context, se *Env) (string, error) {
		v, err := k.Kafka.Ready(ctx, se)
		if err != nil {
			return "", err
		}
		return v + ", SASL_SSL (SCRAM, client certificates)", nil
	})
}
