package compose

import (
	"context"
	"fmt"
	"syscall"
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
