package config

import (
	"strings"
	"testing"
)

// TestEnvironRoundTrip: what a parent passes to a worker process in the
// environment is read back as the same configuration.
func TestEnvironRoundTrip(t *testing.T) {
	c := Default()
	c.PGURL = "postgres://u:p@db.example:5432/x?sslmode=require"
	c.KafkaBrokers = []string{"k1:9092", "k2:9092"}
	c.KafkaTLS = true
	c.KafkaSASL = "scram-sha-512"
	c.RocketMQNamesrv = []string{"n1:9876", "n2:9876"}
	for _, kv := range c.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	got, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if got.PGURL != c.PGURL || strings.Join(got.KafkaBrokers, ",") != "k1:9092,k2:9092" || !got.KafkaTLS ||
		got.KafkaSASL != c.KafkaSASL || strings.Join(got.RocketMQNamesrv, ",") != "n1:9876,n2:9876" {
		t.Fatalf("round trip changed the configuration:\n got  %+v\n want %+v", got, c)
	}
}
