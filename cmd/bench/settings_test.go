package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
