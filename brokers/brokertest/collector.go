package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/envelope"
)

// maxListed caps every id listing in a failure message.
const maxListed = 20

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// UniqueName returns prefix-<test name>-<random>, using only [a-z0-9-] so
// it is a valid topic, queue and group name on every broker (RocketMQ
// allows no dots), and unique so tests can run again and again against
// persistent servers.
func UniqueName(tb testing.TB, prefix string) string {
	n := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(tb.Name()), "-"), "-")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	return strings.Trim(prefix+"-"+n, "-") + "-" + hex.EncodeToString(r[:])
}

// Events builds keys×perKey envelope messages, interleaved so every key's
// versions appear in increasing order: v1 of every key, then v2, …
// IDs are "<prefix>-k<key>-v<version>"; keys are "<prefix>-k<key>".
func Events(tb testing.TB, prefix string, keys, perKey, size int) []brokers.Message {
	tb.Helper()
	out := make([]brokers.Message, 0, keys*perKey)
	for v := 1; v <= perKey; v++ {
		for k := 0; k < keys; k++ {
			out = append(out, Event(tb, prefix, k, v, 0, size))
		}
	}
	return out
}

// Event builds one message; attempt > 0 marks a publisher retry of the same
// event (same id, version and time).
func Event(tb testing.TB, prefix string, key, version, attempt, size int) brokers.Message {
	tb.Helper()
	subject := fmt.Sprintf("%s-k%02d", prefix, key)
	e := &envelope.Event{
		Source:           "inboxbench/brokertest",
		ID:               fmt.Sprintf("%s-v%05d", subject, version),
		Type:             "brokertest.increment",
		Time:             time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		Subject:          subject,
		AggregateVersion: int64(version),
		Kind:             envelope.Increment,
		Amount:           1,
		Attempt:          attempt,
	}
	if size > 0 {
		e.Data = strings.Repeat("x", max(0, size-250)) // the other attributes are ~250 bytes
	}
	body, err := envelope.Marshal(e)
	if err != nil {
		tb.Fatalf("build event: %v", err)
	}
	return brokers.Message{
		Key:     subject,
		ID:      e.ID,
		Headers: map[string]string{"test-header": "v" + fmt.Sprint(version)},
		Body:    body,
	}
}

// Publish publishes msgs in batches, failing the test (naming the broker)
// on any unconfirmed message or after timeout.
func Publish(tb testing.TB, b brokers.Broker, topic string, msgs []brokers.Message, timeout time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	const batch = 500
	for i := 0; i < len(msgs); i += batch {
		end := min(i+batch, len(msgs))
		if err := brokers.FirstError(b.Publish(ctx, topic, msgs[i:end])); err != nil {
			tb.Fatalf("%s: publish to %s (messages %d–%d of %d): %v", b.Name(), topic, i, end-1, len(msgs), err)
		}
	}
}

// Collector is a handler that records what arrives and checks it: every id
// expected, nothing unexpected, per-key order (when checked) and no two
// handler calls of one key at the same time.
type Collector struct {
	broker string
	// Decide returns the verdict for a delivery; nil means Ack. It runs
	// inside the handler, before the delivery is recorded.
	Decide func(d *brokers.Delivery, ev *envelope.Event) brokers.Verdict

	mu         sync.Mutex
	expected   map[string]bool
	acked      map[string]int // id → times acked
	calls      map[string]int // id → handler calls
	deliveries map[string][]brokers.Delivery
	last       map[string]int64 // key → last version acked the first time
	outOfOrder []string
	overlap    []string
	inFlight   map[string]int
	unexpected []string
	bad        []string // deliveries whose fields are wrong
	changed    chan struct{}
}

// NewCollector expects the ids of msgs.
func NewCollector(broker string, msgs []brokers.Message) *Collector {
	c := &Collector{
		broker:     broker,
		expected:   map[string]bool{},
		acked:      map[string]int{},
		calls:      map[string]int{},
		deliveries: map[string][]brokers.Delivery{},
		last:       map[string]int64{},
		inFlight:   map[string]int{},
		changed:    make(chan struct{}, 1),
	}
	c.Expect(msgs)
	return c
}

// Expect adds ids to the expected set.
func (c *Collector) Expect(msgs []brokers.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		c.expected[m.ID] = true
	}
}

// Handle handles one delivery; brokers.PerDelivery(c.Handle) is the
// brokers.Handler.
func (c *Collector) Handle(_ context.Context, d *brokers.Delivery) brokers.Verdict {
	ev, err := envelope.Unmarshal(d.Body)
	c.mu.Lock()
	if err != nil {
		c.bad = append(c.bad, fmt.Sprintf("%s: body is not an envelope: %v", d.TransportID, err))
		c.mu.Unlock()
		return brokers.Reject
	}
	if ev.ID != d.ID || ev.Subject != d.Key || d.TransportID == "" || d.Shard == "" {
		c.bad = append(c.bad, fmt.Sprintf("delivery %s: ID %q Key %q (envelope id %q subject %q) shard %q", d.TransportID, d.ID, d.Key, ev.ID, ev.Subject, d.Shard))
	}
	c.inFlight[d.Key]++
	if c.inFlight[d.Key] > 1 {
		c.overlap = append(c.overlap, d.Key)
	}
	c.calls[d.ID]++
	c.deliveries[d.ID] = append(c.deliveries[d.ID], *d)
	c.mu.Unlock()

	v := brokers.Ack
	if c.Decide != nil {
		v = c.Decide(d, ev)
	}

	c.mu.Lock()
	c.inFlight[d.Key]--
	if v == brokers.Ack || v == brokers.Crash {
		// Crash means "the database committed, then the process died":
		// for the order check that counts as applied.
		if !c.expected[d.ID] {
			c.unexpected = append(c.unexpected, d.ID)
		}
		if c.acked[d.ID] == 0 {
			if ev.AggregateVersion != c.last[d.Key]+1 {
				c.outOfOrder = append(c.outOfOrder, fmt.Sprintf("%s (after v%d)", d.ID, c.last[d.Key]))
			}
			if ev.AggregateVersion > c.last[d.Key] {
				c.last[d.Key] = ev.AggregateVersion
			}
		}
		c.acked[d.ID]++
	}
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return v
}

// AckedCount is the number of distinct ids acked so far.
func (c *Collector) AckedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acked)
}

// Missing returns the expected ids not acked so far, sorted.
func (c *Collector) Missing() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return unseen(c.expected, c.acked)
}

// unseen lists the ids of want that seen does not count, sorted: the
// messages expected (or confirmed) and not acked (or delivered).
func unseen[V any](want map[string]V, seen map[string]int) []string {
	var out []string
	for id := range want {
		if seen[id] == 0 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Calls returns how many handler calls id got.
func (c *Collector) Calls(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// Deliveries returns the deliveries of id so far.
func (c *Collector) Deliveries(id string) []brokers.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.deliveries[id])
}

// WaitFor waits until cond holds (checked on every delivery and every
// 100ms), failing the test after timeout with what is missing.
func (c *Collector) WaitFor(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			tb.Fatalf("%s: timed out after %v waiting for %s; %s", c.broker, timeout, what, c.Summary())
		case <-c.changed:
		case <-tick.C:
		}
	}
}

// WaitAll waits until every expected id has been acked.
func (c *Collector) WaitAll(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	c.WaitFor(tb, "every published event to be acked", timeout, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for id := range c.expected {
			if c.acked[id] == 0 {
				return false
			}
		}
		return true
	})
}

// Summary lists missing, unexpected, out-of-order and duplicate ids (at
// most maxListed each).
func (c *Collector) Summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	missing := unseen(c.expected, c.acked)
	var dup []string
	for id, n := range c.acked {
		if n > 1 {
			dup = append(dup, id)
		}
	}
	return fmt.Sprintf("expected %d, acked %d distinct; missing %s; unexpected %s; out-of-order %s; duplicates %s; concurrent calls for keys %s; bad deliveries %s",
		len(c.expected), len(c.acked), list(missing), list(c.unexpected), list(c.outOfOrder), list(dup), list(c.overlap), list(c.bad))
}

// Check fails the test on unexpected ids, bad deliveries and, when order
// is true, on out-of-order or overlapping handler calls. Duplicates are
// logged, not failed: every driver is at-least-once.
func (c *Collector) Check(tb testing.TB, order bool) {
	tb.Helper()
	c.mu.Lock()
	fail := len(c.unexpected) > 0 || len(c.bad) > 0 || (order && (len(c.outOfOrder) > 0 || len(c.overlap) > 0))
	dups := 0
	for _, n := range c.acked {
		if n > 1 {
			dups++
		}
	}
	c.mu.Unlock()
	if fail {
		tb.Errorf("%s: %s", c.broker, c.Summary())
	} else if dups > 0 {
		tb.Logf("%s: %d ids delivered more than once (allowed: at-least-once)", c.broker, dups)
	}
}

func list(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	ids = slices.Clone(ids)
	sort.Strings(ids)
	ids = slices.Compact(ids)
	if len(ids) > maxListed {
		return fmt.Sprintf("%d: %s …", len(ids), strings.Join(ids[:maxListed], ", "))
	}
	return fmt.Sprintf("%d: %s", len(ids), strings.Join(ids, ", "))
}
