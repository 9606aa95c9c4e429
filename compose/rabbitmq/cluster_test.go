package rabbitmq

import (
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/compose"
)

// TestPidNode: a classic queue's leader is the node of its process, as
// the CLI prints the pid.
func TestPidNode(t *testing.T) {
	for in, want := range map[string]string{
		"<inboxbench-r1@localhost.1796284382.1174.0>": "inboxbench-r1@localhost",
		"<rabbit@host.example.org.17.2.0>":            "rabbit@host.example.org",
		"#PID<10986.1174.0>":                          "",
	} {
		if got := pidNode(in); got != want {
			t.Errorf("pidNode(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRabbitMQClusterNodes: three nodes with their own names, ports,
// directories and the cluster's settings; the endpoints list every node.
func TestRabbitMQClusterNodes(t *testing.T) {
	e := &compose.Env{Dir: t.TempDir(), Variant: compose.VariantReplicated}
	c := &Cluster{}
	seen := map[string]bool{}
	for _, n := range c.nodes(e) {
		for _, k := range []string{n.name, n.path(e), n.label} {
			if seen[k] {
				t.Errorf("%s shared by two nodes", k)
			}
			seen[k] = true
		}
		env := strings.Join(n.env(e), "\n")
		if !strings.Contains(env, "net_ticktime 15") || !strings.Contains(env, "inet_dist_use_interface {127,0,0,1}") {
			t.Errorf("%s: Erlang arguments missing from %q", n.label, env)
		}
	}
	ep, err := c.Endpoints(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{":56672/", ":56674/", ":56676/"} {
		if !strings.Contains(ep["rabbitmq.url"], p) {
			t.Errorf("endpoints %q lack the node at %s", ep["rabbitmq.url"], p)
		}
	}
	if ep["rabbitmq.quorum-size"] != "3" {
		t.Errorf("quorum size %q, want 3", ep["rabbitmq.quorum-size"])
	}
}
