package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inboxbench/inboxbench/brokers/kafka"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/runner"
)

// TestSettingErrorsNameFlags: a library's error names a setting by its
// key; bench names it by the flag the user typed, and a registered
// setting by its environment variable too, wherever the error sits in
// what is printed.
func TestSettingErrorsNameFlags(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("kafka: %w", config.Invalid(kafka.SettingBrokers, nil, "no seed brokers configured")),
			"kafka: --kafka-brokers / INBOXBENCH_KAFKA_BROKERS: no seed brokers configured"},
		{usageError{config.Invalid(runner.KeyWorkersLocal, -1, "counts processes: 0 or more")},
			"--workers -1: counts processes: 0 or more"},
		{config.Invalid(runner.KeySearch, nil, "not with %s, %s", runner.KeyWorkersRemote, "other.thing"),
			"--find-max-rate: not with --remote-workers, other.thing"},
		{errors.Join(config.Invalid(runner.KeyRunID, "a b", "bad"), errors.New("db.example: down"), config.Invalid("no.such-key", 1, "kept")),
			"--run-id \"a b\": bad\ndb.example: down\nno.such-key 1: kept"},
	} {
		if got := describe(tc.err); got != tc.want {
			t.Errorf("describe(%q)\n got  %q\n want %q", tc.err, got, tc.want)
		}
	}
}

// TestBadSettingsExitTwoNamingTheFlag runs bench as a user would: an
// option the runner refuses, and a driver setting the registry refuses,
// exit 2 with the flag (and variable) in the message.
func TestBadSettingsExitTwoNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--workload", "../../workloads/smoke.yaml", "--workers", "-1"}, "bench: --workers -1: counts processes: 0 or more"},
		{[]string{"run", "--workload", "../../workloads/smoke.yaml", "--run-id", "a b"}, `bench: --run-id "a b": use up to 100 letters`},
		{[]string{"run", "--kafka-sasl", "md5"}, `bench: --kafka-sasl / INBOXBENCH_KAFKA_SASL "md5": not supported`},
		// Settings that cannot work together, refused before any dial.
		{[]string{"run", "--kafka-cert-file", "settings_test.go"}, `bench: --kafka-key-file / INBOXBENCH_KAFKA_KEY_FILE: missing: --kafka-cert-file / INBOXBENCH_KAFKA_CERT_FILE is set`},
		{[]string{"run", "--rocketmq-ca-file", "/nonexistent/ca.crt"}, `bench: --rocketmq-ca-file / INBOXBENCH_ROCKETMQ_CA_FILE "/nonexistent/ca.crt": open: no such file or directory`},
		{[]string{"run", "--kafka-ca-file", "settings_test.go"}, `bench: --kafka-ca-file / INBOXBENCH_KAFKA_CA_FILE "settings_test.go": holds no PEM certificate`},
		{[]string{"run", "--rabbitmq-ca-file", "settings_test.go"}, `bench: --rabbitmq-ca-file / INBOXBENCH_RABBITMQ_CA_FILE: set, but --rabbitmq-url / INBOXBENCH_RABBITMQ_URL is amqp:// (plaintext)`},
		{[]string{"run", "--rabbitmq-sasl", "external"}, `bench: --rabbitmq-sasl / INBOXBENCH_RABBITMQ_SASL "external": takes the identity from the client certificate`},
		{[]string{"run", "--kafka-tls=false", "--kafka-ca-file", "settings_test.go"}, `bench: --kafka-ca-file / INBOXBENCH_KAFKA_CA_FILE: set, but --kafka-tls / INBOXBENCH_KAFKA_TLS turns TLS off`},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("bench %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.want)
		}
	}
}

// TestOptionFlagsExist: every flag the key map names is a flag of bench.
func TestOptionFlagsExist(t *testing.T) {
	cfg := config.Default()
	flags := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot(&cfg))
	for key, flag := range optionFlags {
		if !flags[flag] {
			t.Errorf("%s maps to --%s, which no command has", key, flag)
		}
	}
}

// TestSettingsThatWouldDoNothingExitTwo: settings that validate one by
// one but would be ignored, or would send a password in clear, are
// refused before anything runs, naming the setting to change; what the
// message shows of a URL never includes its password.
func TestSettingsThatWouldDoNothingExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"conform", "--list", "--kafka-user", "alice"}, `--kafka-user / INBOXBENCH_KAFKA_USER "alice": is never sent: --kafka-sasl / INBOXBENCH_KAFKA_SASL is empty`},
		{[]string{"conform", "--list", "--kafka-password", "Pw-Secret-1"}, `--kafka-password / INBOXBENCH_KAFKA_PASSWORD: is never sent`},
		{[]string{"conform", "--list", "--kafka-sasl", "scram-sha-512", "--kafka-password", "Pw-Secret-1"}, `--kafka-user / INBOXBENCH_KAFKA_USER: is empty: SASL scram-sha-512`},
		{[]string{"conform", "--list", "--kafka-sasl", "scram-sha-256", "--kafka-user", "alice"}, `--kafka-password / INBOXBENCH_KAFKA_PASSWORD: is empty`},
		{[]string{"conform", "--list", "--kafka-sasl", "plain", "--kafka-user", "alice", "--kafka-password", "Pw-Secret-1", "--kafka-brokers", "kafka.example:9092"},
			`--kafka-sasl / INBOXBENCH_KAFKA_SASL "plain": sends the password in clear without TLS to kafka.example:9092`},
		{[]string{"conform", "--list", "--rocketmq-access-key", "ak"}, `--rocketmq-secret-key / INBOXBENCH_ROCKETMQ_SECRET_KEY: is empty while --rocketmq-access-key`},
		{[]string{"conform", "--list", "--rocketmq-secret-key", "Pw-Secret-1"}, `--rocketmq-access-key / INBOXBENCH_ROCKETMQ_ACCESS_KEY: is empty while --rocketmq-secret-key`},
		{[]string{"conform", "--list", "--rabbitmq-url", "amqp://u:Pw-Secret-1@rabbit.example/v"}, `--rabbitmq-url / INBOXBENCH_RABBITMQ_URL: an amqp:// URL sends its password in clear (AMQP PLAIN without TLS) to rabbit.example:5672`},
		{[]string{"conform", "--list", "--rabbitmq-url", "amqps://u:Pw-Secret-1%@rabbit.example/v"}, `--rabbitmq-url / INBOXBENCH_RABBITMQ_URL "amqps://u:***@rabbit.example/v": the user or password is not valid in a URL`},
		{[]string{"conform", "--list", "--rabbitmq-url", "amqps:/u:Pw-Secret-1@rabbit.example/v"}, `--rabbitmq-url / INBOXBENCH_RABBITMQ_URL: must start with amqp:// or amqps://`},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("bench %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.want)
		}
		if strings.Contains(stderr.String(), "Secret-1") {
			t.Errorf("bench %s: the password is in the message: %s", strings.Join(tc.args, " "), stderr.String())
		}
	}
	// What is refused by default is accepted once allowed, or over TLS.
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	stdout := os.Stdout
	os.Stdout = devNull // the scenario list
	defer func() { os.Stdout = stdout }()
	for _, args := range [][]string{
		{"conform", "--list", "--kafka-sasl", "plain", "--kafka-user", "alice", "--kafka-password", "pw", "--kafka-brokers", "kafka.example:9092", "--allow-plaintext-passwords"},
		{"conform", "--list", "--kafka-sasl", "plain", "--kafka-user", "alice", "--kafka-password", "pw", "--kafka-brokers", "kafka.example:9092", "--kafka-tls"},
		{"conform", "--list", "--kafka-sasl", "plain", "--kafka-user", "alice", "--kafka-password", "pw", "--kafka-brokers", "127.0.0.1:9092"},
		{"conform", "--list", "--rabbitmq-url", "amqp://u:pw@rabbit.example/v", "--allow-plaintext-passwords"},
		{"conform", "--list", "--rabbitmq-url", "amqps://u:pw@rabbit.example/v"},
		{"conform", "--list", "--rocketmq-access-key", "ak", "--rocketmq-secret-key", "sk"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, &stderr); code != 0 {
			t.Errorf("bench %s: exit %d, stderr %q; want it accepted", strings.Join(args, " "), code, stderr.String())
		}
	}
}
