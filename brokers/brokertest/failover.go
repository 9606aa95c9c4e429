package brokertest

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// Replicated returns the configuration of the replicated stack (the
// endpoints `--topology replicated` gives every command), its Env and the
// named service as a compose.Cluster. The test fails, naming the service
// and what to run, when that service is not ready: it never skips.
func Replicated(t testing.TB, service string) (config.Config, *compose.Env, compose.Cluster) {
	t.Helper()
	cfg := testenv.Config(t)
	cfg.StackDir = testenv.StackDir(t, cfg)
	cfg = cfg.With(compose.SettingTopology, compose.TopologyReplicated)
	// What the stack prints (a node started again, and why) goes to the
	// test's log.
	e, err := compose.NewEnv(cfg, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := compose.Select(e.Variant, []string{service})
	if err != nil {
		t.Fatalf("%s: %v", service, err)
	}
	c, ok := svcs[0].(compose.Cluster)
	if !ok {
		t.Fatalf("the replicated stack's %s is not a cluster", service)
	}
	// A cluster a previous test hit may still be settling (a node
	// catching up): ready within a minute, or the test fails. A node that
	// has not rejoined after 30 s is started again, once: RocketMQ 5.3's
	// slave can stall for good after the handshake with a newly elected
	// master (its store.log ends at "truncate dirty files"), outside the
	// SyncStateSet, until it is restarted.
	begin := time.Now()
	deadline, rescued := begin.Add(time.Minute), false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.Ready(ctx, e)
		cancel()
		if err == nil {
			break
		}
		if !rescued && time.Since(begin) > 30*time.Second {
			rescued = true
			if restartStragglers(t, c, e, err) {
				deadline = time.Now().Add(time.Minute)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of the replicated stack is not ready (%v): start it with `bench stack up --topology replicated %s`", service, err, service)
		}
		time.Sleep(time.Second)
	}
	cfg, err = compose.ApplyVariant(cfg)
	if err != nil {
		t.Fatalf("endpoints of the replicated stack: %v", err)
	}
	return cfg, e, c
}

// restartStragglers starts again every node of c that is down, and kills
// and starts again every follower that answers but is out of sync, logging
// why; it reports whether it started any. A node that does not answer but
// runs (paused, or busy) is left alone.
func restartStragglers(t testing.TB, c compose.Cluster, e *compose.Env, why error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	statuses := c.NodeStatus(ctx, e)
	cancel()
	started := false
	for _, s := range statuses {
		stalled := s.Healthy && strings.Contains(s.Role, "not in sync") && !strings.HasPrefix(s.Role, "master")
		if !stalled && (s.Healthy || s.Proc.Running()) {
			continue
		}
		started = true
		t.Logf("%s has not rejoined for 30 s (%s; %v): starting it again", s.Name, cmp.Or(s.Role, s.Detail), why)
		sctx, scancel := context.WithTimeout(context.Background(), 3*time.Minute)
		if stalled {
			if err := s.Proc.Kill(sctx, 0); err != nil { // returns once it is gone
				t.Logf("stop %s: %v", s.Name, err)
			}
		}
		if err := c.StartNode(sctx, e, s.Name); err != nil {
			t.Logf("start %s again: %v", s.Name, err)
		}
		scancel()
	}
	return started
}

// FailoverSpec is one failover of a replicated cluster under a stream of
// messages: the leader of the test topic's shards is signalled (killed,
// or paused) while messages are published at a rate and consumed.
type FailoverSpec struct {
	Broker  brokers.Broker
	Env     *compose.Env
	Cluster compose.Cluster
	// Resource names the topic's shards for Cluster.Leaders, from the
	// topic (RabbitMQ: the "<topic>." queues; RocketMQ: the topic).
	Resource func(topic string) string
	Shards   int
	Rate     int // messages per second
	// Signal is what hits the leader: SIGKILL (then the node is started
	// again after Down) or SIGSTOP (then SIGCONT after Down).
	Signal syscall.Signal
	// Before is the stream before the fault, Down how long the node
	// stays killed or paused, After the stream after it is back.
	Before, Down, After time.Duration
	// Lag, when set, pauses every other node (SIGSTOP) for this long
	// before the leader is hit, and resumes them right after: followers
	// that fell behind the leader while staying its replicas (inside
	// Kafka's ISR window, RocketMQ's SyncStateSet), the moment a weak
	// setting loses what the leader alone confirmed. A cluster that
	// implements compose.Lagger detaches its followers instead (Detach).
	Lag time.Duration
	// StopConsumer closes the consumer for the Lag and subscribes again
	// after the hit: a consumer that lags behind reads nothing of what
	// the leader alone has before it is lost.
	StopConsumer bool
	// Lossy says the cluster runs with its weak setting (Weaken): lost
	// messages are the expected outcome, reported rather than failed.
	Lossy bool
}

// FailoverResult is what one failover cost.
type FailoverResult struct {
	Leader string // the node hit
	// Published is the messages confirmed, Delivered the distinct ones
	// delivered, Duplicates the deliveries beyond the first of one id.
	Published, Delivered, Duplicates int
	// PublishErrors counts confirms that failed (each sent again, with
	// the same id, until confirmed).
	PublishErrors int
	// PublishOutage is the longest time without a confirm from the fault
	// on, ConsumeOutage the longest without a first delivery.
	PublishOutage, ConsumeOutage time.Duration
	// Lost lists confirmed ids never delivered (the test fails on any).
	Lost []string
}

// String sums the failover up on one line, for the test's log.
func (r FailoverResult) String() string {
	return fmt.Sprintf("%s hit: %d confirmed (%d confirms failed and were sent again), %d delivered, %d duplicates, publish outage %s, consume outage %s, %d lost",
		r.Leader, r.Published, r.PublishErrors, r.Delivered, r.Duplicates, r.PublishOutage.Round(10*time.Millisecond), r.ConsumeOutage.Round(10*time.Millisecond), len(r.Lost))
}

// Failover publishes at spec.Rate (each message whose confirm fails is
// sent again with its id, as the runner's publisher does) and consumes,
// hits the leader of the topic's shards with spec.Signal after
// spec.Before, brings it back after spec.Down, goes on for spec.After,
// then waits until every confirmed message was delivered. It fails the
// test for every confirmed message that never arrives, and returns the
// figures.
func Failover(t *testing.T, spec FailoverSpec) FailoverResult {
	t.Helper()
	r := &failoverRun{t: t, spec: spec, b: spec.Broker, topic: Topic(t, spec.Broker, spec.Shards), group: UniqueName(t, "g"),
		confirmed: map[string]time.Time{}, delivered: map[string]int{}, errSeen: map[string]bool{}}
	if err := r.subscribe(); err != nil {
		t.Fatalf("%s: subscribe %s: %v", r.b.Name(), r.topic, err)
	}
	defer r.unsubscribe()
	r.ctx, r.cancel = context.WithCancel(context.Background())
	defer r.cancel()
	ap, ok := r.b.(brokers.AsyncPublisher)
	if !ok {
		t.Fatalf("%s publishes only synchronously", r.b.Name())
	}
	r.ap = ap
	r.total = int((spec.Before + spec.Down + spec.After).Seconds() * float64(spec.Rate))
	pubDone := r.stream()
	time.Sleep(spec.Before)
	r.findLeader()
	faultAt := r.hit()
	defer func() { // the cluster is left whole whatever happened
		if t.Failed() {
			r.back()
		}
	}()
	t.Logf("%s: %v %s (leader of %s) at %s", r.b.Name(), spec.Signal, r.leader.Name, spec.Resource(r.topic), faultAt.Format("15:04:05.000"))
	time.Sleep(spec.Down)
	r.back()
	t.Logf("%s: %s back after %s", r.b.Name(), r.leader.Name, time.Since(faultAt).Round(100*time.Millisecond))
	<-pubDone
	wait := time.Now().Add(3 * time.Minute)
	r.waitConfirmed(wait)
	r.waitDelivered(wait)
	r.cancel()
	r.inflight.Wait()
	return r.result(faultAt)
}

// failoverRun is the state of one Failover: the stream's messages, what
// became of them, and the nodes hit.
type failoverRun struct {
	t      *testing.T
	spec   FailoverSpec
	b      brokers.Broker
	ap     brokers.AsyncPublisher
	topic  string
	group  string
	total  int                // messages the stream publishes
	ctx    context.Context    // the stream's: cancelled at the end
	cancel context.CancelFunc // of ctx

	mu        sync.Mutex
	confirmed map[string]time.Time
	delivered map[string]int
	firstAt   []time.Time
	confirmAt []time.Time
	res       FailoverResult
	errSeen   map[string]bool

	subMu sync.Mutex
	sub   brokers.Subscription

	// inflight counts the messages handed over or waiting to be sent
	// again: send's caller has counted m.
	inflight sync.WaitGroup

	leader    compose.Node
	followers []compose.Node
}

// handle acks every delivery, counting first deliveries and duplicates.
func (r *failoverRun) handle(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs := make([]brokers.Verdict, len(ds))
	for i, d := range ds {
		r.delivered[d.ID]++
		if r.delivered[d.ID] == 1 {
			r.firstAt = append(r.firstAt, time.Now())
		} else {
			r.res.Duplicates++
		}
		vs[i] = brokers.Ack
	}
	return vs
}

func (r *failoverRun) subscribe() error {
	s, err := r.b.Subscribe(context.Background(), r.topic, r.group, brokers.SubscribeOptions{MaxBatch: 16}, r.handle)
	if err != nil {
		return err
	}
	r.subMu.Lock()
	r.sub = s
	r.subMu.Unlock()
	return nil
}

// unsubscribe closes the subscription, if there is one.
func (r *failoverRun) unsubscribe() {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	if r.sub != nil {
		r.sub.Close()
	}
}

// resubscribe subscribes again until a node takes it, for up to 2
// minutes (in its own goroutine: the cluster may still be electing).
func (r *failoverRun) resubscribe() {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := r.subscribe()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Errorf("%s: subscribe %s again: %v", r.b.Name(), r.topic, err)
			return
		}
		time.Sleep(time.Second)
	}
}

// send publishes m, and again 200 ms after each failed confirm until the
// stream ends.
func (r *failoverRun) send(m brokers.Message) {
	r.ap.PublishAsync(r.ctx, r.topic, []brokers.Message{m}, func(errs []error) {
		defer r.inflight.Done()
		r.mu.Lock()
		defer r.mu.Unlock()
		if errs[0] == nil {
			r.confirmed[m.ID] = time.Now()
			r.confirmAt = append(r.confirmAt, time.Now())
			return
		}
		r.res.PublishErrors++
		if kind := msgID.ReplaceAllString(errs[0].Error(), "m…"); len(r.errSeen) < 20 && !r.errSeen[kind] {
			r.errSeen[kind] = true
			r.t.Logf("%s: confirm failed (sent again): %v", time.Now().Format("15:04:05.000"), errs[0])
		}
		if r.ctx.Err() == nil {
			r.inflight.Add(1)
			time.AfterFunc(200*time.Millisecond, func() { r.send(m) })
		}
	})
}

// stream publishes the run's messages at spec.Rate, each at its due
// time, in a goroutine of its own; the channel is closed once it is done.
func (r *failoverRun) stream() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		for i := range r.total {
			due := start.Add(time.Duration(float64(i) / float64(r.spec.Rate) * float64(time.Second)))
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(time.Until(due)):
			}
			r.inflight.Add(1)
			r.send(brokers.Message{Key: fmt.Sprintf("k%02d", i%32), ID: fmt.Sprintf("m%06d", i), Body: []byte(fmt.Sprintf(`{"n":%d}`, i))})
		}
	}()
	return done
}

// findLeader asks the cluster which node leads the topic's shards; the
// others are its followers.
func (r *failoverRun) findLeader() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	leaders, err := r.spec.Cluster.Leaders(ctx, r.spec.Env, r.spec.Resource(r.topic))
	cancel()
	if err != nil || len(leaders) == 0 {
		r.t.Fatalf("%s: leaders of %s: %v", r.b.Name(), r.topic, err)
	}
	r.leader = leaders[0]
	r.res.Leader = r.leader.Name
	for _, n := range r.spec.Cluster.Nodes(r.spec.Env) {
		if n.Name != r.leader.Name {
			r.followers = append(r.followers, n)
		}
	}
}

// hit signals the leader, after holding its followers back for spec.Lag
// (then let go at once), and returns when it did.
func (r *failoverRun) hit() time.Time {
	resume := func() {}
	if r.spec.Lag > 0 {
		if r.spec.StopConsumer {
			r.subMu.Lock()
			if err := r.sub.Close(); err != nil {
				r.t.Errorf("%s: close the subscription for the lag: %v", r.b.Name(), err)
			}
			r.sub = nil
			r.subMu.Unlock()
		}
		resume = r.holdFollowers()
		time.Sleep(r.spec.Lag)
	}
	faultAt := time.Now()
	err := r.leader.Signal(r.spec.Signal)
	resume()
	if err != nil {
		r.t.Fatalf("%s: %v", r.b.Name(), err)
	}
	if r.spec.Lag > 0 && r.spec.StopConsumer {
		go r.resubscribe() // to whichever node took over, once one has
	}
	return faultAt
}

// holdFollowers stops the followers copying from the leader — detached
// by the cluster's own means (compose.Lagger), or else paused — and
// returns what lets them go again.
func (r *failoverRun) holdFollowers() (resume func()) {
	name := r.b.Name()
	if l, ok := r.spec.Cluster.(compose.Lagger); ok {
		// Followers that keep what was already sent to them while
		// paused are cut off by the cluster's own means.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		undo, err := l.Detach(ctx, r.spec.Env, r.leader)
		cancel()
		resume = func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := undo(ctx); err != nil {
				r.t.Errorf("%s: let the followers of %s copy again: %v", name, r.leader.Name, err)
			}
		}
		if err != nil {
			resume()
			r.t.Fatalf("%s: detach the followers of %s: %v", name, r.leader.Name, err)
		}
		r.t.Logf("%s: followers of %s detached for %s", name, r.leader.Name, r.spec.Lag)
		return resume
	}
	resume = func() {
		for _, n := range r.followers {
			if err := n.Signal(syscall.SIGCONT); err != nil {
				r.t.Errorf("%s: resume %s: %v", name, n.Name, err)
			}
		}
	}
	for _, n := range r.followers {
		if err := n.Signal(syscall.SIGSTOP); err != nil {
			resume()
			r.t.Fatalf("%s: pause %s: %v", name, n.Name, err)
		}
	}
	r.t.Logf("%s: followers %s paused for %s", name, nodeNames(r.followers), r.spec.Lag)
	return resume
}

// back brings the leader back: resumed after SIGSTOP, else started again.
func (r *failoverRun) back() {
	if r.spec.Signal == syscall.SIGSTOP {
		if err := r.leader.Signal(syscall.SIGCONT); err != nil {
			r.t.Errorf("%s: resume %s: %v", r.b.Name(), r.leader.Name, err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := r.spec.Cluster.StartNode(ctx, r.spec.Env, r.leader.Name); err != nil {
		r.t.Errorf("%s: start %s again: %v", r.b.Name(), r.leader.Name, err)
	}
}

// waitConfirmed waits until every message is confirmed (they are sent
// again until they are), failing the test at wait.
func (r *failoverRun) waitConfirmed(wait time.Time) {
	for {
		r.mu.Lock()
		n := len(r.confirmed)
		r.mu.Unlock()
		if n == r.total {
			return
		}
		if time.Now().After(wait) {
			r.t.Fatalf("%s: %d of %d messages confirmed 3 minutes after the stream ended", r.b.Name(), n, r.total)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitDelivered waits until every confirmed message was delivered, until
// wait (a lossy run: a minute); what is still missing then is lost, which
// fails the test unless the run is lossy.
func (r *failoverRun) waitDelivered(wait time.Time) {
	lossyWait := time.Now().Add(time.Minute)
	for {
		lost := r.undelivered()
		if len(lost) == 0 {
			return
		}
		if time.Now().After(wait) || (r.spec.Lossy && time.Now().After(lossyWait)) {
			r.mu.Lock()
			r.res.Lost = lost
			r.mu.Unlock()
			report := r.t.Errorf
			if r.spec.Lossy {
				report = r.t.Logf
			}
			report("%s: %d confirmed messages were never delivered after %s was hit: %s", r.b.Name(), len(lost), r.leader.Name, strings.Join(lost[:min(len(lost), maxListed)], ", "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// undelivered lists the confirmed messages not delivered so far, sorted.
func (r *failoverRun) undelivered() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return unseen(r.confirmed, r.delivered)
}

// result completes the run's figures, from faultAt on, and logs them.
func (r *failoverRun) result(faultAt time.Time) FailoverResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.res
	res.Published, res.Delivered = len(r.confirmed), len(r.delivered)
	res.PublishOutage = longestGap(r.confirmAt, faultAt)
	res.ConsumeOutage = longestGap(r.firstAt, faultAt)
	name := r.b.Name()
	r.t.Logf("%s: %s", name, res)
	r.t.Logf("%s: confirms per second from the fault on: %v", name, perSecond(r.confirmAt, faultAt))
	r.t.Logf("%s: first deliveries per second from the fault on: %v", name, perSecond(r.firstAt, faultAt))
	return res
}

// testLog writes each line it gets to the test's log.
type testLog struct{ t testing.TB }

// Write logs p as one line.
func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func nodeNames(ns []compose.Node) string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return strings.Join(out, ", ")
}

// Weaken runs the rest of the test with c's weak setting (compose.Weakener):
// its client settings in the returned configuration, its server changes
// applied now and undone when the test ends. It returns the setting's
// name; the test fails when c has none.
func Weaken(t *testing.T, cfg config.Config, e *compose.Env, c compose.Cluster) (config.Config, string) {
	t.Helper()
	w, ok := c.(compose.Weakener)
	if !ok {
		t.Fatalf("%s has no weak setting", c.Name())
	}
	weak := w.WeakSetting()
	for k, v := range weak.Settings {
		cfg = cfg.With(k, v)
	}
	if weak.Apply != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		restore, err := weak.Apply(ctx, e)
		if restore != nil {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := restore(ctx); err != nil {
					t.Errorf("%s: undo %s: %v", c.Name(), weak.Name, err)
				}
			})
		}
		if err != nil {
			t.Fatalf("%s: apply %s: %v", c.Name(), weak.Name, err)
		}
	}
	return cfg, weak.Name
}

// perSecond counts the events of each second from `from` on.
func perSecond(ts []time.Time, from time.Time) []int {
	var out []int
	for _, x := range ts {
		if x.Before(from) {
			continue
		}
		i := int(x.Sub(from) / time.Second)
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}

// msgID matches the ids Failover gives its messages.
var msgID = regexp.MustCompile(`m\d{6}`)

// longestGap is the longest time between events from `from` on (the first
// gap counted from `from` itself).
func longestGap(ts []time.Time, from time.Time) time.Duration {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	prev := from
	for _, x := range ts {
		if x.Before(from) {
			continue
		}
		gap = max(gap, x.Sub(prev))
		prev = x
	}
	return gap
}
