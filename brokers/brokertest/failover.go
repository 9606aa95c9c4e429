package brokertest

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
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
	b := spec.Broker
	topic := setup(t, b, spec.Shards)
	var (
		mu        sync.Mutex
		confirmed = map[string]time.Time{}
		delivered = map[string]int{}
		firstAt   []time.Time
		confirmAt []time.Time
		res       FailoverResult
		errSeen   = map[string]bool{}
	)
	group := UniqueName(t, "g")
	handle := func(_ context.Context, ds []*brokers.Delivery) []brokers.Verdict {
		mu.Lock()
		defer mu.Unlock()
		vs := make([]brokers.Verdict, len(ds))
		for i, d := range ds {
			delivered[d.ID]++
			if delivered[d.ID] == 1 {
				firstAt = append(firstAt, time.Now())
			} else {
				res.Duplicates++
			}
			vs[i] = brokers.Ack
		}
		return vs
	}
	var (
		subMu sync.Mutex
		sub   brokers.Subscription
	)
	subscribe := func() error {
		s, err := b.Subscribe(context.Background(), topic, group, brokers.SubscribeOptions{MaxBatch: 16}, handle)
		if err != nil {
			return err
		}
		subMu.Lock()
		sub = s
		subMu.Unlock()
		return nil
	}
	if err := subscribe(); err != nil {
		t.Fatalf("%s: subscribe %s: %v", b.Name(), topic, err)
	}
	defer func() {
		subMu.Lock()
		defer subMu.Unlock()
		if sub != nil {
			sub.Close()
		}
	}()
	// resubscribe subscribes again until a node takes it, for up to 2
	// minutes (in its own goroutine: the cluster may still be electing).
	resubscribe := func() {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := subscribe()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: subscribe %s again: %v", b.Name(), topic, err)
				return
			}
			time.Sleep(time.Second)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ap, ok := b.(brokers.AsyncPublisher)
	if !ok {
		t.Fatalf("%s publishes only synchronously", b.Name())
	}
	// inflight counts the messages handed over or waiting to be sent
	// again: send's caller has counted m.
	var inflight sync.WaitGroup
	var send func(m brokers.Message)
	send = func(m brokers.Message) {
		ap.PublishAsync(ctx, topic, []brokers.Message{m}, func(errs []error) {
			defer inflight.Done()
			if errs[0] == nil {
				mu.Lock()
				confirmed[m.ID] = time.Now()
				confirmAt = append(confirmAt, time.Now())
				mu.Unlock()
				return
			}
			mu.Lock()
			res.PublishErrors++
			if kind := msgID.ReplaceAllString(errs[0].Error(), "m…"); len(errSeen) < 20 && !errSeen[kind] {
				errSeen[kind] = true
				t.Logf("%s: confirm failed (sent again): %v", time.Now().Format("15:04:05.000"), errs[0])
			}
			mu.Unlock()
			if ctx.Err() == nil {
				inflight.Add(1)
				time.AfterFunc(200*time.Millisecond, func() { send(m) })
			}
		})
	}
	total := int((spec.Before + spec.Down + spec.After).Seconds() * float64(spec.Rate))
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		start := time.Now()
		for i := range total {
			due := start.Add(time.Duration(float64(i) / float64(spec.Rate) * float64(time.Second)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(due)):
			}
			inflight.Add(1)
			send(brokers.Message{Key: fmt.Sprintf("k%02d", i%32), ID: fmt.Sprintf("m%06d", i), Body: []byte(fmt.Sprintf(`{"n":%d}`, i))})
		}
	}()

	time.Sleep(spec.Before)
	lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
	leaders, err := spec.Cluster.Leaders(lctx, spec.Env, spec.Resource(topic))
	lcancel()
	if err != nil || len(leaders) == 0 {
		t.Fatalf("%s: leaders of %s: %v", b.Name(), topic, err)
	}
	leader := leaders[0]
	res.Leader = leader.Name
	var followers []compose.Node
	for _, n := range spec.Cluster.Nodes(spec.Env) {
		if n.Name != leader.Name {
			followers = append(followers, n)
		}
	}
	resume := func() {
		for _, n := range followers {
			if err := n.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("%s: resume %s: %v", b.Name(), n.Name, err)
			}
		}
	}
	if spec.Lag > 0 && spec.StopConsumer {
		subMu.Lock()
		if err := sub.Close(); err != nil {
			t.Errorf("%s: close the subscription for the lag: %v", b.Name(), err)
		}
		sub = nil
		subMu.Unlock()
	}
	if spec.Lag > 0 {
		if l, ok := spec.Cluster.(compose.Lagger); ok {
			// Followers that keep what was already sent to them while
			// paused are cut off by the cluster's own means.
			dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
			undo, err := l.Detach(dctx, spec.Env, leader)
			dcancel()
			resume = func() {
				rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
				defer rcancel()
				if err := undo(rctx); err != nil {
					t.Errorf("%s: let the followers of %s copy again: %v", b.Name(), leader.Name, err)
				}
			}
			if err != nil {
				resume()
				t.Fatalf("%s: detach the followers of %s: %v", b.Name(), leader.Name, err)
			}
			t.Logf("%s: followers of %s detached for %s", b.Name(), leader.Name, spec.Lag)
		} else {
			for _, n := range followers {
				if err := n.Signal(syscall.SIGSTOP); err != nil {
					resume()
					t.Fatalf("%s: pause %s: %v", b.Name(), n.Name, err)
				}
			}
			t.Logf("%s: followers %s paused for %s", b.Name(), nodeNames(followers), spec.Lag)
		}
		time.Sleep(spec.Lag)
	}
	faultAt := time.Now()
	err = leader.Signal(spec.Signal)
	if spec.Lag > 0 {
		resume()
	}
	if err != nil {
		t.Fatalf("%s: %v", b.Name(), err)
	}
	if spec.Lag > 0 && spec.StopConsumer {
		go resubscribe() // to whichever node took over, once one has
	}
	back := func() {
		if spec.Signal == syscall.SIGSTOP {
			if err := leader.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("%s: resume %s: %v", b.Name(), leader.Name, err)
			}
			return
		}
		sctx, scancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer scancel()
		if err := spec.Cluster.StartNode(sctx, spec.Env, leader.Name); err != nil {
			t.Errorf("%s: start %s again: %v", b.Name(), leader.Name, err)
		}
	}
	defer func() { // the cluster is left whole whatever happened
		if t.Failed() {
			back()
		}
	}()
	t.Logf("%s: %v %s (leader of %s) at %s", b.Name(), spec.Signal, leader.Name, spec.Resource(topic), faultAt.Format("15:04:05.000"))
	time.Sleep(spec.Down)
	back()
	t.Logf("%s: %s back after %s", b.Name(), leader.Name, time.Since(faultAt).Round(100*time.Millisecond))
	<-pubDone
	// Every message is confirmed in the end (or the test fails).
	wait := time.Now().Add(3 * time.Minute)
	var lossyWait time.Time // set once all are confirmed: a lossy run waits a minute for deliveries
	for {
		mu.Lock()
		n := len(confirmed)
		mu.Unlock()
		if n == total {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("%s: %d of %d messages confirmed 3 minutes after the stream ended", b.Name(), n, total)
		}
		time.Sleep(100 * time.Millisecond)
	}
	lossyWait = time.Now().Add(time.Minute)
	for {
		mu.Lock()
		var lost []string
		for id := range confirmed {
			if delivered[id] == 0 {
				lost = append(lost, id)
			}
		}
		mu.Unlock()
		if len(lost) == 0 {
			break
		}
		if time.Now().After(wait) || (spec.Lossy && time.Now().After(lossyWait)) {
			sort.Strings(lost)
			res.Lost = lost
			report := t.Errorf
			if spec.Lossy {
				report = t.Logf
			}
			report("%s: %d confirmed messages were never delivered after %s was hit: %s", b.Name(), len(lost), leader.Name, strings.Join(lost[:min(len(lost), maxListed)], ", "))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	inflight.Wait()
	mu.Lock()
	defer mu.Unlock()
	res.Published, res.Delivered = len(confirmed), len(delivered)
	res.PublishOutage = longestGap(confirmAt, faultAt)
	res.ConsumeOutage = longestGap(firstAt, faultAt)
	t.Logf("%s: %s", b.Name(), res)
	t.Logf("%s: confirms per second from the fault on: %v", b.Name(), perSecond(confirmAt, faultAt))
	t.Logf("%s: first deliveries per second from the fault on: %v", b.Name(), perSecond(firstAt, faultAt))
	return res
}

// testLog writes each line it gets to the test's log.
type testLog struct{ t testing.TB }

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
