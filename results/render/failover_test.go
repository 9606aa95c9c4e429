package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/results"
)

// TestFaultReport: a cell that injected a fault gets a row with its
// outage in the summary, report.md and report.html, and report.html draws
// its timeline with the fault's second marked; a conformance row's fault
// likewise. The durability table shows the replication verdict.
func TestFaultReport(t *testing.T) {
	out := 4.5
	series := func(drop ...int) []int64 {
		s := make([]int64, 30)
		for i := range s {
			s[i] = 200
		}
		for _, i := range drop {
			s[i] = 0
		}
		return s
	}
	tl := &results.Timeline{Effects: series(13, 14, 15, 16), Published: series(13, 14, 15), PublishErrors: make([]int64, 30),
		PublishRetries: make([]int64, 30), Redeliveries: make([]int64, 30), Duplicates: make([]int64, 30)}
	f := results.Fault{Name: "leader-kill of broker", What: []string{"kill -9 of kafka-2, the leader of t of kafka", "kafka-2 back in the cluster after 12s"},
		AtS: 12.5, EndS: 30, Outage: &results.Outage{PrePublishPerS: 200, PreConsumePerS: 200, PublishOutageS: &out, PublishRecovered: true,
			Duplicates: 651, E2EP999: 26_900_000}}
	r := loadFixture(t, testdata)
	r.Run.Cells[0].Faults, r.Run.Cells[0].Timeline = []results.Fault{f}, tl
	r.Run.Env.AddDurability("kafka", map[string]string{"fsync before confirm": "no: page cache", "replicated before confirm": "yes: acks=all waits for the in-sync replicas, at least min.insync.replicas=2 of replication factor 3"})
	var sum bytes.Buffer
	if err := WriteSummary(&sum, r.Run); err != nil {
		t.Fatal(err)
	}
	md := string(render(t, Markdown, r))
	page := string(render(t, HTML, r))
	for name, text := range map[string]string{"summary": sum.String(), "report.md": md, "report.html": page} {
		for _, want := range []string{"leader-kill of broker", "kill -9 of kafka-2", "4.5s", "not back before the end", "651", "26.9s"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	for _, want := range []string{`id="faults"`, `data-chart="faults-0"`, "the bars mark the second each fault hit in (leader-kill of broker at 12.5s)", "replicated before confirm", "min.insync.replicas=2 of replication factor 3"} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if !strings.Contains(md, "| yes: acks=all waits for the in-sync replicas") {
		t.Error("report.md's durability table lacks the replication verdict")
	}

	c := &results.Conformance{Rows: []results.ConformRow{{Scenario: "leader-kill-weak", Broker: "kafka", Strategy: "tx", Expected: results.VerdictFail,
		Verdict: results.VerdictFail, MustShow: "lost-effect", Control: "acks=1 (the leader alone confirms a record)",
		Anomalies: map[string]int64{"lost-effect": 488}, Faults: []results.Fault{f}, Timeline: tl}}}
	cpage := string(render(t, HTML, &results.Report{Conform: c}))
	cmd := string(render(t, Markdown, &results.Report{Conform: c}))
	for name, text := range map[string]string{"conform report.html": cpage, "conform report.md": cmd} {
		for _, want := range []string{"FAIL with lost-effect under acks=1", "leader-kill-weak kafka/tx", "kill -9 of kafka-2"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	if !strings.Contains(cpage, `data-chart="conform-faults-0"`) {
		t.Error("the conform report does not draw the row's timeline")
	}
	var mx bytes.Buffer
	if err := WriteConformFaults(&mx, c.Rows); err != nil || !strings.Contains(mx.String(), "PUBLISH OUTAGE") {
		t.Errorf("bench conform's fault table: %v\n%s", err, mx.String())
	}
}
