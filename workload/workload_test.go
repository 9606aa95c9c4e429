package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
)

func TestParseRejectsUnknownAndBadFields(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"unknown field":  {"aggregate: 10\n", "field aggregate not found"},
		"unknown nested": {"faults:\n  crash: 0.1\n", "field crash not found"},
		"bad skew":       {"key_skew:\n  kind: pareto\n", "accepted values are uniform, zipf, hot"},
		"bad ratio":      {"faults:\n  duplicate_republish: 1.5\n", "faults.duplicate_republish: 1.5 is not a ratio"},
		"bad duration":   {"duration: ten\n", `"ten" is not a duration`},
		"few events":     {"aggregates: 10\nevents: 5\n", "fewer than aggregates"},
		"ooo no parking": {"parking: false\nfaults:\n  out_of_order: 0.1\n", "parking off"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) error = %v, want it to contain %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestShippedWorkloadsParse(t *testing.T) {
	for _, name := range []string{"smoke", "default", "contention", "faults", "failover"} {
		s, err := Load("../workloads/" + name + ".yaml")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Name != name {
			t.Errorf("%s: name = %q", name, s.Name)
		}
	}
}

func spec(t *testing.T, y string) *Spec {
	t.Helper()
	s, err := Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGenerateIsDeterministic(t *testing.T) {
	y := "seed: 7\naggregates: 20\nevents: 500\nsnapshot_ratio: 0.1\nkey_skew: {kind: zipf, s: 1.2}\nfaults: {out_of_order: 0.05, duplicate_republish: 0.05}\n"
	a, b := Generate(spec(t, y)), Generate(spec(t, y))
	if !reflect.DeepEqual(a.Publishes, b.Publishes) || !reflect.DeepEqual(a.Expected, b.Expected) {
		t.Fatal("the same spec generated two different plans")
	}
	c := Generate(spec(t, strings.Replace(y, "seed: 7", "seed: 8", 1)))
	if reflect.DeepEqual(a.Publishes, c.Publishes) {
		t.Fatal("a different seed generated the same plan")
	}
}

// replay applies events in order as the oracle reads them, checking that
// each identity comes once and each aggregate's versions follow on
// without a gap or a repeat.
func replay(t *testing.T, events []*envelope.Event) map[string]State {
	t.Helper()
	got := map[string]State{}
	ids := map[string]bool{}
	for _, e := range events {
		if ids[e.Key()] {
			t.Fatalf("event identity %s generated twice", e.Key())
		}
		ids[e.Key()] = true
		st := got[e.Subject]
		if e.AggregateVersion != st.Version+1 {
			t.Fatalf("%s: version %d after %d", e.Subject, e.AggregateVersion, st.Version)
		}
		if e.Kind == envelope.Snapshot {
			st.Balance = e.Amount
		} else {
			st.Balance += e.Amount
		}
		st.Version = e.AggregateVersion
		got[e.Subject] = st
	}
	return got
}

// TestOracle recomputes the expected state from the distinct events: the
// last version of each aggregate, and the balance from increments up to
// the last snapshot's full balance.
func TestOracle(t *testing.T) {
	p := Generate(spec(t, "aggregates: 30\nevents: 3000\nsnapshot_ratio: 0.2\nkey_skew: {kind: hot, hot_share: 0.5}\n"))
	if len(p.Events) != 3000 {
		t.Fatalf("%d events, want 3000", len(p.Events))
	}
	if !reflect.DeepEqual(replay(t, p.Events), p.Expected) {
		t.Fatal("oracle differs from the replayed stream")
	}
	if hot := p.Expected[AggregateID(0)].Version; hot < 1400 {
		t.Errorf("hot aggregate got %d events, want about half of 3000", hot)
	}
}

func TestFaultPlan(t *testing.T) {
	p := Generate(spec(t, "aggregates: 10\nevents: 2000\nfaults: {out_of_order: 0.1, duplicate_republish: 0.1}\n"))
	if p.OutOfOrder == 0 || p.Republished == 0 {
		t.Fatalf("out of order %d, republished %d: both faults should fire at 10%%", p.OutOfOrder, p.Republished)
	}
	if len(p.Publishes) != len(p.Events)+p.Republished {
		t.Fatalf("%d publishes for %d events + %d republishes", len(p.Publishes), len(p.Events), p.Republished)
	}
	// Every event is published at least once, and every gap the stream
	// opens is closed later by the missing version.
	seen := map[string]int{}
	last := map[string]int64{}
	gaps := 0
	for _, pb := range p.Publishes {
		e := pb.Event
		seen[e.Key()]++
		if pb.Republish != (e.Attempt > 0) {
			t.Fatalf("%s: republish flag and attempt disagree", e.Key())
		}
		if !pb.Republish && e.AggregateVersion > last[e.Subject]+1 {
			gaps++
		}
		if e.AggregateVersion > last[e.Subject] {
			last[e.Subject] = e.AggregateVersion
		}
	}
	for _, e := range p.Events {
		if seen[e.Key()] == 0 {
			t.Fatalf("%s never published", e.Key())
		}
	}
	if gaps == 0 {
		t.Fatal("out_of_order produced no version gap in the publish order")
	}
}

func TestPerEventFaultsArePure(t *testing.T) {
	s := spec(t, "faults: {crash_after_commit: 0.3, concurrent_duplicates: 0.3}\n")
	p := Generate(s)
	crashes := 0
	for _, e := range p.Events {
		if s.CrashAfterCommit(e) != s.CrashAfterCommit(e) {
			t.Fatal("crash decision is not a function of the event")
		}
		if s.CrashAfterCommit(e) {
			crashes++
		}
	}
	if f := float64(crashes) / float64(len(p.Events)); f < 0.25 || f > 0.35 {
		t.Fatalf("crash share %.3f, want about 0.3", f)
	}
	// Small ratios must fire too (similar keys must not share their fate).
	s.Faults.CrashAfterCommit = 0.01
	crashes = 0
	for _, e := range p.Events {
		if s.CrashAfterCommit(e) {
			crashes++
		}
	}
	if crashes < 50 || crashes > 150 {
		t.Fatalf("%d crashes at 1%% of %d events, want about 100", crashes, len(p.Events))
	}
	retry := *p.Events[0]
	retry.Attempt = 1
	if s.CrashAfterCommit(&retry) {
		t.Fatal("a republished copy must not crash again: the fault is on the first delivery")
	}
	// The external faults: a pure function of the event, each its own.
	s.Faults.ExternalTimeout, s.Faults.CrashAfterCall = 0.2, 0.2
	var timeouts, calls, both int
	for _, e := range p.Events {
		to, cr := s.ExternalTimeoutFault(e.Key()), s.CrashAfterCall(e.Key())
		if to != s.ExternalTimeoutFault(e.Key()) || cr != s.CrashAfterCall(e.Key()) {
			t.Fatal("an external fault decision is not a function of the event")
		}
		timeouts, calls = timeouts+b2i(to), calls+b2i(cr)
		both += b2i(to && cr)
	}
	if n := len(p.Events); timeouts < n/7 || timeouts > n/4 || calls < n/7 || calls > n/4 || both > n/16 {
		t.Fatalf("external faults of %d events: %d timeouts, %d crashes, %d both: want about a fifth each, independent", n, timeouts, calls, both)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestEncodePadsToMessageSize(t *testing.T) {
	s := spec(t, "message_size: 1024\n")
	b, err := s.Encode(Generate(s).Events[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 || len(b) > 1030 {
		t.Fatalf("encoded %d bytes, want about 1024", len(b))
	}
	if _, err := envelope.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
}

// TestEncodeSplicesWhatMarshalWrites: the padding spliced in before the
// closing brace gives the bytes of the envelope marshalled with it.
func TestEncodeSplicesWhatMarshalWrites(t *testing.T) {
	for _, size := range []int{0, 100, 300, 512, 4096} {
		s := spec(t, fmt.Sprintf("message_size: %d\n", size))
		for _, e := range Generate(s).Events[:20] {
			got, err := s.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := envelope.Marshal(e)
			c := *e
			if n := size - len(b) - len(`,"data":""`); len(b) < size && n > 0 {
				c.Data = padding(n)
			}
			want, _ := envelope.Marshal(&c)
			if !bytes.Equal(got, want) {
				t.Fatalf("size %d: Encode\n got %s\nwant %s", size, got, want)
			}
		}
	}
}

// TestPublishedPlan: a stream cut short expects only what was sent, and
// only what could apply of it.
func TestPublishedPlan(t *testing.T) {
	s, err := Parse([]byte("name: cut\nseed: 2\naggregates: 3\nevents: 60\nsnapshot_ratio: 0.2\nfaults:\n  out_of_order: 0.2\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := Generate(s)
	all := make([]bool, len(p.Publishes))
	for i := range all {
		all[i] = true
	}
	full := p.Published(all)
	if len(full.Events) != len(p.Events) || !maps.Equal(full.Expected, p.Expected) {
		t.Fatalf("everything sent: %d events %v, want %d %v", len(full.Events), full.Expected, len(p.Events), p.Expected)
	}
	half := make([]bool, len(p.Publishes))
	for i := range len(half) / 2 {
		half[i] = true
	}
	cut := p.Published(half)
	if len(cut.Events) == 0 || len(cut.Events) >= len(p.Events) {
		t.Fatalf("half sent: %d of %d events expected", len(cut.Events), len(p.Events))
	}
	// Replaying the expected events reaches the expected state, with no
	// gap left behind.
	for agg, want := range cut.Expected {
		var st State
		for _, e := range cut.Events {
			if e.Subject != agg {
				continue
			}
			if e.Kind == envelope.Snapshot && e.AggregateVersion > st.Version {
				st = State{Balance: e.Amount, Version: e.AggregateVersion}
			} else if e.AggregateVersion == st.Version+1 {
				st = State{Balance: st.Balance + e.Amount, Version: e.AggregateVersion}
			}
		}
		if st != want {
			t.Errorf("%s: replay gives %+v, expected %+v", agg, st, want)
		}
	}
}

// TestParseRejectsOutOfBounds: every bound Validate keeps is named with
// the field when a file breaks it. NaN and infinities first: a NaN passes
// every comparison, and zipf with s: .nan never finishes generating.
func TestParseRejectsOutOfBounds(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"nan zipf s":          {"key_skew: {kind: zipf, s: .nan}\n", "key_skew.s: NaN: not a finite number"},
		"inf zipf s":          {"key_skew: {kind: zipf, s: .inf}\n", "key_skew.s: +Inf: not a finite number"},
		"nan hot share":       {"key_skew: {kind: hot, hot_share: .NaN}\n", "key_skew.hot_share: NaN"},
		"nan unused s":        {"key_skew: {kind: uniform, s: .nan}\n", "key_skew.s: NaN"},
		"nan ratio":           {"snapshot_ratio: .nan\n", "snapshot_ratio: NaN: not a finite number"},
		"nan fault":           {"faults: {duplicate_republish: .nan}\n", "faults.duplicate_republish: NaN"},
		"-inf fault":          {"faults: {publisher_retry: -.inf}\n", "faults.publisher_retry: -Inf"},
		"inf publish rate":    {"publish_rate: .inf\n", "publish_rate: +Inf: not a finite number"},
		"nan publish rate":    {"publish_rate: .nan\n", "publish_rate: NaN"},
		"tiny publish rate":   {"publish_rate: 1e-300\n", "publish_rate: 1e-300 events/s would take more than"},
		"amount overflow":     {"events: 1000\namount: {min: 1, max: 9223372036854775807}\n", "amount.max: 9223372036854775807: at most 9214157878975800 with 1000 events"},
		"constant overflow":   {"events: 1000\namount: {distribution: constant, min: 9214157878975801}\n", "amount.min: 9214157878975801: at most 9214157878975800"},
		"storm too big":       {"faults: {concurrent_duplicates: 0.1, storm_consumers: 33}\n", "faults.storm_consumers: 33: use 2 to 32"},
		"storm huge unused":   {"faults: {storm_consumers: 100000}\n", "faults.storm_consumers: 100000: use 2 to 32"},
		"storm negative":      {"faults: {storm_consumers: -1}\n", "faults.storm_consumers: -1"},
		"restarts too many":   {"faults: {consumer_restarts: 1001}\n", "faults.consumer_restarts: 1001: use 0 to 1000"},
		"restarts negative":   {"faults: {consumer_restarts: -1}\n", "faults.consumer_restarts: -1: use 0 to 1000"},
		"message over kafka":  {"message_size: 995917\n", "message_size: 995917: at most 995916 bytes: Kafka's default limit is 1000012 bytes"},
		"message over 4 MiB":  {"message_size: 4194305\n", "message_size: 4194305: at most 995916"},
		"message negative":    {"message_size: -1\n", "message_size: -1: must not be negative"},
		"ratio above one":     {"faults: {crash_after_commit: 1.01}\n", "faults.crash_after_commit: 1.01 is not a ratio"},
		"negative publish":    {"publish_rate: -1\n", "publish_rate: -1: use 0"},
		"events beyond bound": {"events: 50000001\n", "events: 50000001: at most 50000000"},
		"external delay":      {"external: {delay: 11s, timeout: 1m}\n", "external.delay: 11s: use 0 to 10s"},
		"delay over timeout":  {"external: {delay: 50ms, timeout: 50ms}\n", "external.delay: 50ms is not below external.timeout (50ms)"},
		"timeout too short":   {"external: {timeout: 1ms}\n", "external.timeout: 1ms: use 10ms to 1m0s"},
		"lease below timeout": {"external: {timeout: 2s, lease: 1s}\n", "external.lease: 1s: use more than external.timeout (2s)"},
		"external timeouts":   {"faults: {external_timeout: 2}\n", "faults.external_timeout: 2 is not a ratio"},
		"crash after call":    {"faults: {crash_after_call: -0.1}\n", "faults.crash_after_call: -0.1 is not a ratio"},
		"unavailable forever": {"faults: {external_unavailable: 11m}\n", "faults.external_unavailable: 11m0s: use 0 to 10m"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) error = %v, want it to contain %q", tc.in, err, tc.want)
			}
		})
	}
}

// TestParseAcceptsBounds: the bounds themselves are accepted, so a file
// at the limit runs.
func TestParseAcceptsBounds(t *testing.T) {
	for _, in := range []string{
		"message_size: 995916\n",
		"events: 1000\namount: {min: 1, max: 9214157878975800}\n",
		"faults: {concurrent_duplicates: 0.1, storm_consumers: 32, consumer_restarts: 1000}\n",
		"publish_rate: 0.001\nevents: 10000\n",
		"key_skew: {kind: zipf, s: 1e300}\n",
		"external: {delay: 10s, timeout: 1m, lease: 1h}\nfaults: {external_timeout: 1, crash_after_call: 1, external_unavailable: 10m}\n",
	} {
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("Parse(%q): %v", in, err)
		}
	}
}

// TestLargestAmountsFitTheOracle generates a stream at the amount bound
// with every event on one aggregate's side (hot skew): the oracle's
// balance stays positive, i.e. it did not wrap around.
func TestLargestAmountsFitTheOracle(t *testing.T) {
	s := spec(t, "aggregates: 2\nevents: 1000\namount: {distribution: constant, min: 9214157878975800}\nkey_skew: {kind: hot, hot_share: 0.999}\n")
	p := Generate(s)
	for agg, st := range p.Expected {
		if st.Balance <= 0 || st.Balance != st.Version*s.Amount.Min {
			t.Fatalf("%s: balance %d after %d events of %d: the sum overflowed", agg, st.Balance, st.Version, s.Amount.Min)
		}
	}
}

// TestEncodeAtMessageSizeBound measures what the encoder adds over
// message_size: a padded envelope is exactly message_size bytes, and the
// largest unpadded one (an idempotency-keyed, republished event with its
// intended send time) stays far below the headroom kept for Kafka's
// record framing, key and headers.
func TestEncodeAtMessageSizeBound(t *testing.T) {
	s := spec(t, "aggregates: 999999\nevents: 1000000\nmessage_size: 995916\namount: {min: 9000000000000, max: 9000000000000}\n")
	e := &envelope.Event{SpecVersion: envelope.SpecVersion, Source: Source, ID: EventID(AggregateID(999999), 1000000) + "-conflict",
		Type: "account.snapshot", Time: epoch, Subject: "conflict-" + AggregateID(999999), AggregateVersion: 1000000,
		Kind: envelope.Snapshot, Amount: 9223372036854775807, IdempotencyKey: "req-" + EventID(AggregateID(999999), 1000000),
		Tenant: "tenant-1", Operation: "credit", Attempt: 1000, IntendedAt: epoch.Add(time.Hour)}
	b, err := s.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != MaxMessageSize {
		t.Fatalf("encoded %d bytes at message_size %d: the padding is off", len(b), MaxMessageSize)
	}
	s.MessageSize = 0
	natural, err := s.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest unpadded envelope: %d bytes", len(natural))
	if len(natural) > RecordHeadroom/4 {
		t.Fatalf("an unpadded envelope takes %d bytes: more than a quarter of the %d-byte headroom", len(natural), RecordHeadroom)
	}
}

// TestPublishRateMax: publish_rate: max asks for the rate search, and
// errors on other lines still name their line.
func TestPublishRateMax(t *testing.T) {
	s, err := Parse([]byte("name: x\npublish_rate: max\nconsumers: 2\n"))
	if err != nil || !s.FindMaxRate || s.PublishRate != 0 || s.Consumers != 2 {
		t.Fatalf("spec %+v, err %v", s, err)
	}
	if s, err := Parse([]byte("publish_rate: 100\n")); err != nil || s.FindMaxRate {
		t.Fatalf("a number is a fixed rate: %+v %v", s, err)
	}
	_, err = Parse([]byte("publish_rate: max\nconsumer: 2\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want an error naming line 2, got %v", err)
	}
}

// TestInboxSizeFields: the prefill and the retention beside the stream are
// checked, each error naming its field.
func TestInboxSizeFields(t *testing.T) {
	s := spec(t, "inbox_prefill: 10000000\ninbox_prefill_age: 30d\ninbox_prune_every: 5s\ninbox_prune_keep: 7d\n")
	if s.InboxPrefillAge.D() != 30*24*time.Hour || s.InboxPruneKeep.D() != 7*24*time.Hour || s.InboxPruneEvery.D() != 5*time.Second {
		t.Fatalf("parsed %+v", s)
	}
	for y, want := range map[string]string{
		"inbox_prefill: -1\n":                                         "inbox_prefill: -1",
		"inbox_prefill: 100000001\ninbox_prefill_age: 1d\n":           "inbox_prefill: 100000001",
		"inbox_prefill: 10\n":                                         "need inbox_prefill_age",
		"inbox_prefill_age: 3d\n":                                     "inbox_prefill_age: 72h0m0s without inbox_prefill",
		"inbox_prefill: 10\ninbox_prefill_age: 4000d\n":               "inbox_prefill_age",
		"inbox_prefill: 10\ninbox_prefill_age: 3x\n":                  "is not a duration",
		"inbox_prune_every: 5s\n":                                     "needs inbox_prune_keep",
		"inbox_prune_keep: 7d\n":                                      "without inbox_prune_every",
		"inbox_prune_every: 100ms\ninbox_prune_keep: 7d\n":            "inbox_prune_every: 100ms",
		"inbox_prune_every: 5s\ninbox_prune_keep: 10m\n":              "inbox_prune_keep: 10m0s: use 1h to 3650d",
		"inbox_prefill: 10\ninbox_prefill_age: 1d\ninbox_prefil: 3\n": "inbox_prefil",
	} {
		_, err := Parse([]byte(y))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", y, err, want)
		}
	}
	// Unset, the fields stay out of the result's workload object, so
	// trend lines of existing workloads do not break.
	b, err := json.Marshal(spec(t, "name: plain\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "inbox_") {
		t.Errorf("an unset prefill is written: %s", b)
	}
}
