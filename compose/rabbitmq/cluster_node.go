package rabbitmq

// A node of the replicated RabbitMQ: how it is reached, started, probed
// and joined to the first.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pidNode is the node of an Erlang pid as the CLI prints it
// ("<inboxbench-r1@localhost.1700000000.1234.0>").
func pidNode(pid string) string {
	s := strings.TrimSuffix(strings.TrimPrefix(pid, "<"), ">")
	at := strings.IndexByte(s, '@')
	if at < 0 {
		return ""
	}
	// The host part ends where the pid's numbers begin.
	host := s[at+1:]
	parts := strings.Split(host, ".")
	for len(parts) > 1 {
		if _, err := strconv.Atoi(parts[len(parts)-1]); err != nil {
			break
		}
		parts = parts[:len(parts)-1]
	}
	return s[:at+1] + strings.Join(parts, ".")
}

// url is the driver's AMQP URL of the node.
func (n rabbitClusterNode) url() string {
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/%s", rabbitUser, rabbitPassword, n.port, rabbitVhost)
}

// startIfStopped boots the node unless its recorded process runs.
func (n rabbitClusterNode) startIfStopped(ctx context.Context) error {
	if _, alive := n.proc().PID(); alive {
		return nil
	}
	return n.Service.Start(ctx, n.e)
}

// rabbitClusterConf is what the cluster's nodes add to the plain node's
// rabbitmq.conf. A paused node resumed after the others declared it down
// (net_ticktime) finds the cluster partitioned: its metadata (queue
// records) and theirs go separate ways. With the default (ignore) the
// partition stays until a node is restarted by hand; pause_minority does
// not heal it either (the paused node never saw the others go down, so
// it never counts itself a minority: measured). autoheal restarts the
// nodes of the partition with fewer clients, which rejoin the others;
// quorum queues keep their messages in Raft logs, which survive it.
const rabbitClusterConf = "cluster_partition_handling = autoheal\n"

// probe opens an AMQP connection and a channel on the node and returns
// its version and the name of the cluster it belongs to.
func (n rabbitClusterNode) probe(ctx context.Context) (version, cluster string, err error) {
	d := 3 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	conn, err := amqp.DialConfig(n.url(), amqp.Config{Dial: amqp.DefaultDial(d)})
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return "", "", err
	}
	ch.Close()
	version, _ = conn.Properties["version"].(string)
	cluster, _ = conn.Properties["cluster_name"].(string)
	return version, cluster, nil
}

// waitAMQP waits until the node answers AMQP, failing early when its
// process exits.
func (n rabbitClusterNode) waitAMQP(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, _, err := n.probe(ctx)
		if err == nil {
			return nil
		}
		if !n.proc().Running() {
			return fmt.Errorf("%s exited during startup (last check: %v); read %s", n.label, err, strings.Join(n.logs(), " and "))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer AMQP at 127.0.0.1:%d after %s: %v", n.label, n.port, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// join makes the node a member of first's cluster (once: the first boot).
func (n rabbitClusterNode) join(ctx context.Context, first rabbitClusterNode) error {
	if err := n.waitAMQP(ctx, 150*time.Second); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"stop_app"}, {"join_cluster", first.name}, {"start_app"}} {
		if _, err := n.ctl(cctx, args...); err != nil {
			return fmt.Errorf("%s: join the cluster of %s: %w", n.label, first.label, err)
		}
	}
	return nil
}

// jsonPart skips whatever the CLI prints before its JSON document.
func jsonPart(s string) string {
	if i := strings.IndexAny(s, "[{"); i >= 0 {
		return s[i:]
	}
	return s
}
