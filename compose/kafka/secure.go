package kafka

import (
	"context"
	"fmt"
	"os"
	"strconv"

	kafkabroker "github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/compose"
)

// Secure is the secure variant's Kafka (Service runs it): one KRaft
// node whose client listener is SASL_SSL — TLS with the stack CA's
// certificate, client certificates required (ssl.client.auth=required,
// which a SASL_SSL listener takes only with its listener prefix),
// then a SCRAM-SHA-512 (or -256) login. The KRaft controller listens on a
// plaintext loopback port, which only the node itself uses. The SCRAM
// users are created when the storage is formatted: the node's own
// inter-broker login (admin) and the suite's (inboxbench). There is no
// authorizer: any authenticated user may do anything, the suite's user
// included.
type Secure struct{ Service }

const (
	secureKafkaBroker     = "127.0.0.1:57092"
	secureKafkaController = "127.0.0.1:57093"
	kafkaAdminUser        = "admin"
	// kafkaSCRAM is the mechanism the suite logs in with; the listener
	// also takes SCRAM-SHA-256.
	kafkaSCRAM = "SCRAM-SHA-512"
)

// The passwords of the secure stack's credentials: the suite's user's
// and the node's own inter-broker login's.
const (
	passwordName      = "kafka_password"
	adminPasswordName = "kafka_admin_password"
)

// newSecure is the secure stack's node.
func newSecure() *Secure {
	s := &Secure{}
	s.inst = &kafkaInstance{broker: secureKafkaBroker, controller: secureKafkaController,
		listeners: secureKafkaListeners, format: secureKafkaUsers}
	return s
}

// PasswordNames implements compose.Passworder: the suite's user's and
// the inter-broker login's.
func (*Secure) PasswordNames() []string { return []string{passwordName, adminPasswordName} }

func secureKafkaListeners(e *compose.Env, addr string) (string, error) {
	c, err := compose.ReadCredentials(e)
	if err != nil {
		return "", err
	}
	// Kafka's PEM key store takes the key and the certificate from one
	// file.
	keystore := compose.TLSPath(e, "kafka-keystore.pem")
	key, err := os.ReadFile(compose.TLSPath(e, "kafka.key"))
	if err != nil {
		return "", err
	}
	cert, err := os.ReadFile(compose.TLSPath(e, "kafka.crt"))
	if err != nil {
		return "", err
	}
	if err := compose.WriteFileAtomic(keystore, append(key, cert...), 0o600); err != nil {
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
		addr, secureKafkaController, kafkaSCRAM, kafkaAdminUser, c[adminPasswordName], keystore, compose.TLSPath(e, "ca.crt")), nil
}

// secureKafkaUsers are the storage format's SCRAM users (StorageTool
// --add-scram), both mechanisms for the suite's user.
func secureKafkaUsers(e *compose.Env) ([]string, error) {
	c, err := compose.ReadCredentials(e)
	if err != nil {
		return nil, err
	}
	return []string{
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", kafkaAdminUser, c[adminPasswordName]),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", kafkaAdminUser, c[adminPasswordName]),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", compose.SecureUser, c[passwordName]),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", compose.SecureUser, c[passwordName]),
	}, nil
}

// Endpoints implements compose.Endpointer: the SASL_SSL listener, TLS
// with the CA, the client certificate and key and the server name,
// SCRAM-SHA-512 with the suite's user and its password.
func (k *Secure) Endpoints(e *compose.Env) (map[string]string, error) {
	return compose.WithPassword(e, k, kafkabroker.SettingPassword, passwordName)
}

// Addresses implements compose.Addresser: the endpoints without the
// password.
func (k *Secure) Addresses(e *compose.Env) map[string]string {
	return map[string]string{
		kafkabroker.SettingBrokers:    secureKafkaBroker,
		kafkabroker.SettingTLS:        strconv.FormatBool(true),
		kafkabroker.SettingCAFile:     compose.TLSPath(e, "ca.crt"),
		kafkabroker.SettingCertFile:   compose.TLSPath(e, "client.crt"),
		kafkabroker.SettingKeyFile:    compose.TLSPath(e, "client.key"),
		kafkabroker.SettingServerName: "localhost",
		kafkabroker.SettingSASL:       "scram-sha-512",
		kafkabroker.SettingUser:       compose.SecureUser,
	}
}

// Ports implements compose.Porter: the plain stack's, on the secure
// stack's addresses.
func (k *Secure) Ports(e *compose.Env) []compose.Port { return k.Service.Ports(compose.BindEnv(e, k)) }

// Start makes the node's certificate and passwords, then starts it as the
// plain stack's on the secure stack's addresses.
func (k *Secure) Start(ctx context.Context, e *compose.Env) error {
	if _, err := compose.EnsureSecrets(e, "kafka"); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return k.Service.Start(ctx, compose.BindEnv(e, k))
}

// Ready sends a metadata request over SASL_SSL with the endpoints.
func (k *Secure) Ready(ctx context.Context, e *compose.Env) (string, error) {
	return compose.SecureReady(ctx, e, k.Service.Ready, ", SASL_SSL (SCRAM, client certificates)")
}
