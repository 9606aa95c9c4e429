package brokers

// Route puts a TCP proxy between a consumer outside the suite and the
// broker server at upstream, listening on listen ("" for any free
// loopback port), and returns the address the consumer must dial.
type Route func(upstream, listen string) (string, error)

// OutsideEnv is what an outside consumer is told of a topic: where to
// connect and what to consume.
type OutsideEnv struct {
	// Vars are environment variables: the driver's endpoint settings
	// (their INBOXBENCH_* names) as the consumer must use them, and the
	// topic's layout (INBOXBENCH_QUEUES, INBOXBENCH_DEAD_LETTER …).
	Vars map[string]string
	// Unproxied, when not empty, says why the consumer's connections do
	// not pass through a Route (and so cannot be cut by the suite).
	Unproxied string
}

// Outside is implemented by drivers whose topics a process outside the
// suite can consume — a team's own service under test (package
// service): OutsideEnv describes topic, which Setup created, and group
// to it, every broker address passed through route.
type Outside interface {
	OutsideEnv(topic, group string, route Route) (OutsideEnv, error)
}
