package compose

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Node is one server process of a replicated service (a Kafka broker, a
// RabbitMQ node, a RocketMQ broker, a PostgreSQL primary or standby).
type Node struct {
	Name string // "kafka-1", "postgres-standby", …
	Addr string // its client address on loopback
	Proc Proc
}

// NodeStatus is one node as `bench stack status` shows it.
type NodeStatus struct {
	Node
	// Role is what the node is now, as the cluster says: leader or
	// follower, master or slave, primary or standby ("" when unknown).
	Role    string
	Healthy bool
	Detail  string // the error when unhealthy
}

// Cluster is implemented by the services of a replicated variant: what a
// failover fault needs to find and hit a node, and what status shows.
type Cluster interface {
	Service
	// Nodes lists the service's nodes in a fixed order.
	Nodes(e *Env) []Node
	// NodeStatus asks the running cluster for each node's role and health.
	NodeStatus(ctx context.Context, e *Env) []NodeStatus
	// Leaders returns the nodes that lead what resource names (a topic or
	// queue name, or a prefix of them, as the driver named it; "" for the
	// service as a whole, e.g. PostgreSQL's primary), the node leading
	// the most of it first.
	Leaders(ctx context.Context, e *Env, resource string) ([]Node, error)
	// StartNode starts one node again (after a kill or a stop) and waits
	// until the cluster counts it back in.
	StartNode(ctx context.Context, e *Env, name string) error
}

// Signal sends sig to the node's process group (the process StartDetached
// started and its children), after checking that the recorded pid is
// this node of this stack. SIGKILL is a crash, SIGSTOP a pause (a zombie
// leader until SIGCONT).
func (n Node) Signal(sig syscall.Signal) error {
	pid, err := n.Proc.recorded()
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	if !alive(pid) {
		return fmt.Errorf("%s: pid %d is not running", n.Name, pid)
	}
	if err := n.Proc.Identify(pid); err != nil {
		return fmt.Errorf("%s: pid %d is not the node this stack started: %w", n.Name, pid, err)
	}
	target := pid
	if groupLeader(pid) {
		target = -pid
	}
	if err := syscall.Kill(target, sig); err != nil {
		return fmt.Errorf("%s: signal %v to pid %d: %w", n.Name, sig, pid, err)
	}
	return nil
}

// What else a family of the replicated stack may implement beside Cluster
// (package failover uses each when present, a default otherwise).

// NodeStopper stops one node gracefully (a rolling restart's stop): the
// way the service itself shuts down cleanly (Kafka's controlled shutdown,
// PostgreSQL's fast shutdown). Without it a node is stopped with SIGTERM,
// and SIGKILL after a minute.
type NodeStopper interface {
	StopNode(ctx context.Context, e *Env, name string) error
}

// FailureDetector says how long the cluster takes to notice a node that
// stopped answering (Kafka's broker session timeout, a quorum's election
// timeout, the harness's own timeout for PostgreSQL): a leader-pause
// fault pauses longer. Without it failover assumes DefaultFailureTimeout.
type FailureDetector interface {
	FailureTimeout() time.Duration
}

// DefaultFailureTimeout is the failure-detection time of a cluster that
// does not say (FailureDetector).
const DefaultFailureTimeout = 10 * time.Second

// Promoter is implemented by clusters whose failover the harness carries
// out, as an operator or a tool like Patroni would: PostgreSQL promotes no
// standby on its own. Failover is called once lost stopped answering
// (killed, or paused past FailureTimeout); it fences lost (kill -9, so a
// paused primary never wakes up as a second primary), promotes another
// node and returns it. Clusters that elect a new leader themselves do not
// implement it.
type Promoter interface {
	Failover(ctx context.Context, e *Env, lost Node) (Node, error)
}

// Lagger is implemented by clusters whose followers cannot simply be
// paused to make them fall behind the leader (a PostgreSQL standby keeps
// receiving what the primary streamed into its socket while stopped).
// Detach makes every node but leader stop copying from it, and returns
// how to let them copy again. Without it failover pauses (SIGSTOP) every
// other node: a follower that fetches (Kafka) or is sent (RabbitMQ,
// RocketMQ) nothing while stopped.
type Lagger interface {
	Detach(ctx context.Context, e *Env, leader Node) (resume func(context.Context) error, err error)
}

// Weakener is implemented by clusters with a weak setting: one under
// which a failover loses writes the cluster had confirmed (Kafka acks=1,
// asynchronous PostgreSQL replication). The failover controls run with it
// and must be caught losing effects.
type Weakener interface {
	WeakSetting() Weakness
}

// Weakness is a cluster's weak setting.
type Weakness struct {
	// Name says what it is, as reports show it ("acks=1 (…)").
	Name string
	// Settings are client settings by key (kafka.acks=1), applied to the
	// configuration of the cells that run with it.
	Settings map[string]string
	// Apply, when set, changes the servers and returns how to undo it
	// (PostgreSQL: synchronous_standby_names emptied on the primary).
	Apply func(ctx context.Context, e *Env) (restore func(context.Context) error, err error)
}

// ContinueIfStopped sends SIGCONT to the node's process group when its
// process is stopped (a pause fault whose bench was killed before it
// resumed the node): a stopped node would never answer, and starting it
// again is what every caller of this wants.
func (n Node) ContinueIfStopped() {
	pid, err := n.Proc.recorded()
	if err != nil || !alive(pid) {
		return
	}
	if q, ok := readProc(pid); ok && (q.state == 'T' || q.state == 't') && n.Proc.Identify(pid) == nil {
		_ = n.Signal(syscall.SIGCONT)
	}
}
