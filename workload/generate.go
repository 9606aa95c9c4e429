package workload

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
)

// Source is the CloudEvents source of every generated event.
const Source = "inboxbench/workload"

// epoch is the occurrence time of the first event; fixed so that the same
// seed gives byte-identical envelopes.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Publish is one transport send of an event. The same event can be sent
// several times (a republish keeps the event id and raises Attempt).
type Publish struct {
	Event *envelope.Event
	// Republish marks a duplicate send of an event already in the stream.
	Republish bool
	// Key is the ordering key when it is not the event's aggregate: a
	// request replay or conflict travels behind its original.
	Key string
}

// OrderingKey is the broker's ordering key for the publish.
func (p Publish) OrderingKey() string {
	if p.Key != "" {
		return p.Key
	}
	return p.Event.Subject
}

// Plan is the generated stream and what it must produce.
type Plan struct {
	Spec *Spec
	// Events are the distinct business events, each once, in the order
	// they were generated.
	Events []*envelope.Event
	// Publishes is the send order, with the fault plan applied
	// (reordered successors, republished duplicates).
	Publishes []Publish
	// Expected is the oracle: the final state of every aggregate.
	Expected map[string]State
	// MustNotApply are sends that must never take effect: replays of a
	// request under a new event id, and requests that reuse an
	// idempotency key with other content (CONFLICT).
	MustNotApply []*envelope.Event
	// OutOfOrder counts successor-before-predecessor swaps; Republished
	// counts duplicate sends.
	OutOfOrder, Republished int
}

// State is an aggregate's balance and version.
type State struct {
	Balance int64 `json:"balance"`
	Version int64 `json:"version"`
}

// AggregateID names aggregate i.
func AggregateID(i int) string { return fmt.Sprintf("acct-%06d", i) }

// EventID names version v of an aggregate: stable across resends.
func EventID(agg string, v int64) string { return fmt.Sprintf("%s-v%d", agg, v) }

// Generate builds the plan for s. The same spec (and seed) always gives the
// same plan.
func Generate(s *Spec) *Plan { return generate(s, "") }

// GenerateSegment builds a plan whose aggregate (and so event) ids start
// with prefix: segments of one run (a rate search's steps) share a
// schema and a topic without sharing an aggregate, and each is judged on
// its own.
func GenerateSegment(s *Spec, prefix string) *Plan { return generate(s, prefix) }

func generate(s *Spec, prefix string) *Plan { return newGenerator(s, prefix).chunk() }

// generator makes a spec's stream, one chunk of s.Events events at a time:
// a later chunk continues every aggregate's versions and balance where
// the earlier one left them, with the same random source, so the first
// chunk is Generate's plan and the stream of chunks the same for the same
// seed.
type generator struct {
	s                *Spec
	prefix           string
	rng              *rand.Rand
	counts           []int
	version, balance []int64
	n                int // events generated so far (their occurrence times)
}

func newGenerator(s *Spec, prefix string) *generator {
	return &generator{s: s, prefix: prefix, rng: rand.New(rand.NewPCG(uint64(s.Seed), 0x1b0c5be7c4)),
		counts: spread(s), version: make([]int64, s.Aggregates), balance: make([]int64, s.Aggregates)}
}

// chunk generates the next s.Events events and their fault plan; its
// Expected is every aggregate's state after them.
func (g *generator) chunk() *Plan {
	s, rng := g.s, g.rng
	// The order in which aggregates emit their next version: every
	// aggregate appears counts[i] times, shuffled.
	order := make([]int32, 0, s.Events)
	for i, c := range g.counts {
		for range c {
			order = append(order, int32(i))
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	p := &Plan{Spec: s, Events: make([]*envelope.Event, 0, len(order)), Expected: make(map[string]State, s.Aggregates)}
	for _, a := range order {
		agg := g.prefix + AggregateID(int(a))
		g.version[a]++
		v := g.version[a]
		delta := s.Amount.Min
		if s.Amount.Distribution == "uniform" && s.Amount.Max > s.Amount.Min {
			delta += rng.Int64N(s.Amount.Max - s.Amount.Min + 1)
		}
		g.balance[a] += delta
		e := &envelope.Event{
			SpecVersion: envelope.SpecVersion, Source: Source, ID: EventID(agg, v),
			Type: "account.credited", Time: epoch.Add(time.Duration(g.n) * time.Millisecond),
			Subject: agg, AggregateVersion: v, Kind: envelope.Increment, Amount: delta,
		}
		g.n++
		// A snapshot carries the full balance at its version (keep-latest);
		// version 1 stays an increment so every aggregate starts the same way.
		if v > 1 && s.SnapshotRatio > 0 && rng.Float64() < s.SnapshotRatio {
			e.Kind, e.Type, e.Amount = envelope.Snapshot, "account.snapshot", g.balance[a]
		}
		p.Events = append(p.Events, e)
		p.Expected[agg] = State{Balance: g.balance[a], Version: v}
	}
	p.Publishes = faults(s, rng, p)
	return p
}

// spread decides how many events each aggregate gets (at least one).
func spread(s *Spec) []int {
	n, total := s.Aggregates, s.Events
	w := make([]float64, n)
	switch s.Skew.Kind {
	case "zipf":
		for i := range w {
			w[i] = 1 / math.Pow(float64(i+1), s.Skew.S)
		}
	case "hot":
		for i := range w {
			w[i] = (1 - s.Skew.HotShare) / float64(max(n-1, 1))
		}
		w[0] = s.Skew.HotShare
	default:
		for i := range w {
			w[i] = 1
		}
	}
	var sum float64
	for _, x := range w {
		sum += x
	}
	counts := make([]int, n)
	rest := total - n
	given := 0
	for i := range counts {
		extra := int(float64(rest) * w[i] / sum)
		counts[i] = 1 + extra
		given += extra
	}
	// Hand out what rounding left, by weight order (deterministic).
	for i := 0; given < rest; i = (i + 1) % n {
		counts[i]++
		given++
	}
	return counts
}

// faults turns the event order into the publish order.
func faults(s *Spec, rng *rand.Rand, p *Plan) []Publish {
	pubs := make([]Publish, len(p.Events))
	for i, e := range p.Events {
		pubs[i] = Publish{Event: e}
	}
	if s.Faults.OutOfOrder > 0 {
		// Where an event and its successor are both in the stream, publish
		// the successor in the event's place and the event in the
		// successor's: the consumer sees a version gap first.
		pos := make(map[string]int, len(pubs))
		for i, pb := range pubs {
			pos[pb.Event.ID] = i
		}
		for i := range pubs {
			e := pubs[i].Event
			if rng.Float64() >= s.Faults.OutOfOrder {
				continue
			}
			j, ok := pos[EventID(e.Subject, e.AggregateVersion+1)]
			if !ok || j <= i {
				continue
			}
			pubs[i], pubs[j] = pubs[j], pubs[i]
			pos[pubs[i].Event.ID], pos[pubs[j].Event.ID] = i, j
			p.OutOfOrder++
		}
	}
	if s.Faults.IdempotencyConflicts > 0 || s.Faults.PublisherRetry > 0 {
		out := make([]Publish, 0, len(pubs))
		for _, pb := range pubs {
			out = append(out, pb)
			e := pb.Event
			if s.Faults.PublisherRetry > 0 && rng.Float64() < s.Faults.PublisherRetry {
				c := *e
				c.Attempt = 1
				out = append(out, Publish{Event: &c, Republish: true})
				p.Republished++
			}
			if s.Faults.IdempotencyConflicts > 0 && e.Kind == envelope.Increment && rng.Float64() < s.Faults.IdempotencyConflicts {
				e.IdempotencyKey, e.Tenant, e.Operation = "req-"+e.ID, "tenant-1", "credit"
				// The client retried the same request and the producer
				// emitted it again under a new id: same content.
				replay := *e
				replay.ID = e.ID + "-replay"
				// Another request reusing the key with a different amount,
				// for another account: it must be rejected.
				conflict := *e
				conflict.ID, conflict.Subject, conflict.AggregateVersion = e.ID+"-conflict", "conflict-"+e.ID, 1
				conflict.Amount = e.Amount + 1
				out = append(out, Publish{Event: &replay, Key: e.Subject}, Publish{Event: &conflict, Key: e.Subject})
				p.MustNotApply = append(p.MustNotApply, &replay, &conflict)
			}
		}
		pubs = out
	}
	if s.Faults.DuplicateRepublish > 0 {
		// A republished copy follows its original after up to 1000 other
		// sends: a new transport message carrying the same event id.
		type dup struct {
			at int
			pb Publish
		}
		var dups []dup
		for i, pb := range pubs {
			if rng.Float64() < s.Faults.DuplicateRepublish {
				c := *pb.Event
				c.Attempt = 1
				dups = append(dups, dup{at: i + 1 + rng.IntN(1000), pb: Publish{Event: &c, Republish: true}})
			}
		}
		if len(dups) > 0 {
			out := make([]Publish, 0, len(pubs)+len(dups))
			// dups are generated in increasing i but their targets are not
			// sorted; a stable bucket by target keeps this deterministic.
			byAt := make(map[int][]Publish, len(dups))
			for _, d := range dups {
				byAt[d.at] = append(byAt[d.at], d.pb)
			}
			for i, pb := range pubs {
				out = append(out, byAt[i]...)
				out = append(out, pb)
			}
			for i := len(pubs); i <= len(pubs)+1000; i++ {
				out = append(out, byAt[i]...)
			}
			p.Republished = len(dups)
			pubs = out
		}
	}
	return pubs
}

// chance decides a per-event fault as a pure function of seed, fault name
// and event identity, so every process (the runner and `bench worker`
// processes) takes the same decision without sharing state.
func chance(seed int64, fault, key string, ratio float64) bool {
	if ratio <= 0 {
		return false
	}
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(fault))
	h.Write([]byte(key))
	// FNV's top bits barely change between keys that differ only at the
	// end (acct-000001-v7, acct-000001-v8), so finish with splitmix64's
	// mixer before taking them.
	return float64(mix64(h.Sum64())>>11)/float64(1<<53) < ratio
}

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// CrashAfterCommit reports whether the consumer must crash after
// committing this event's first delivery.
func (s *Spec) CrashAfterCommit(e *envelope.Event) bool {
	// The ratio first: without the fault, no key is built per delivery.
	return e.Attempt == 0 && s.Faults.CrashAfterCommit > 0 && chance(s.Seed, "crash", e.Key(), s.Faults.CrashAfterCommit)
}

// ExternalTimeoutFault reports whether the external call made for the
// event with this key ("source id") is to time out after the service
// applied it (the service fires it once per event).
func (s *Spec) ExternalTimeoutFault(key string) bool {
	return s.Faults.ExternalTimeout > 0 && chance(s.Seed, "external-timeout", key, s.Faults.ExternalTimeout)
}

// CrashAfterCall reports whether the handler must die between the
// external call of the event with this key and the commit that records
// it (the caller makes it happen once per event).
func (s *Spec) CrashAfterCall(key string) bool {
	return s.Faults.CrashAfterCall > 0 && chance(s.Seed, "crash-after-call", key, s.Faults.CrashAfterCall)
}

// Storm reports whether this event is delivered to StormConsumers
// consumers at once.
func (s *Spec) Storm(e *envelope.Event) bool {
	return e.Attempt == 0 && s.Faults.ConcurrentDuplicates > 0 && chance(s.Seed, "storm", e.Key(), s.Faults.ConcurrentDuplicates)
}

// Encode renders the envelope padded to the spec's message size. The
// padding goes in data, the envelope's last field, and is plain ASCII, so
// it is spliced in before the closing brace rather than encoded again.
func (s *Spec) Encode(e *envelope.Event) ([]byte, error) {
	// One allocation: the message is written where it will be padded.
	b, err := envelope.MarshalAppend(make([]byte, 0, max(s.MessageSize, 256)), e)
	if err != nil || len(b) >= s.MessageSize {
		return b, err
	}
	n := s.MessageSize - len(b) - len(`,"data":""`)
	if e.Data != "" {
		c := *e
		c.Data = padding(n)
		return envelope.Marshal(&c)
	}
	if n <= 0 {
		return b, nil
	}
	b = append(b[:len(b)-1], `,"data":"`...)
	for ; n > len(padAlphabet); n -= len(padAlphabet) {
		b = append(b, padAlphabet...)
	}
	b = append(b, padAlphabet[:n]...)
	return append(b, `"}`...), nil
}

const padAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func padding(n int) string {
	if n <= 0 {
		return ""
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = padAlphabet[i%len(padAlphabet)]
	}
	return string(b)
}

// Published is the plan of a stream cut short (a workload with duration:
// publishing stops when the time is up): only what was sent is expected.
// sent[j] says whether Publishes[j] went out. Per aggregate, the sent
// events are replayed in version order as the inbox applies them: an
// increment at the next version, a snapshot at any newer one; an
// increment whose predecessor was never sent can never apply and is left
// out (it stays parked, as it should). Events that could apply, the
// oracle's state after them, and the sent must-not-apply requests are
// what the checker then judges.
func (p *Plan) Published(sent []bool) *Plan {
	was := map[string]bool{} // by event identity: a republished copy counts
	for j, pub := range p.Publishes {
		if j < len(sent) && sent[j] {
			was[pub.Event.Key()] = true
		}
	}
	byAgg := map[string][]*envelope.Event{}
	for _, e := range p.Events {
		if was[e.Key()] {
			byAgg[e.Subject] = append(byAgg[e.Subject], e)
		}
	}
	out := &Plan{Spec: p.Spec, Publishes: p.Publishes, Expected: map[string]State{}, OutOfOrder: p.OutOfOrder, Republished: p.Republished}
	keep := map[*envelope.Event]bool{}
	for agg, evs := range byAgg {
		sort.Slice(evs, func(i, j int) bool { return evs[i].AggregateVersion < evs[j].AggregateVersion })
		var st State
		for _, e := range evs {
			switch v := e.AggregateVersion; {
			case e.Kind == envelope.Snapshot && v > st.Version:
				st = State{Balance: e.Amount, Version: v}
			case e.Kind == envelope.Increment && v == st.Version+1:
				st = State{Balance: st.Balance + e.Amount, Version: v}
			case v > st.Version:
				continue // its predecessor never came
			}
			keep[e] = true
		}
		out.Expected[agg] = st
	}
	for _, e := range p.Events {
		if keep[e] {
			out.Events = append(out.Events, e)
		}
	}
	for _, e := range p.MustNotApply {
		if was[e.Key()] {
			out.MustNotApply = append(out.MustNotApply, e)
		}
	}
	return out
}
