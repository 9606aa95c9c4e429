package results

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestConformSummary(t *testing.T) {
	c, err := ReadConform(filepath.Join("testdata", "conform.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Summary
	want := ConformSummary{Rows: 24, AsExpected: 22, BrokenTotal: 2, BrokenCaught: 2, MutationScore: 1, Verdict: VerdictFail}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("summary = %+v, want %+v", s, want)
	}
}

func TestConformRowExpectations(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  ConformRow
		ok   bool
	}{
		{"correct passes", ConformRow{Expected: VerdictPass, Verdict: VerdictPass}, true},
		{"correct fails", ConformRow{Expected: VerdictPass, Verdict: VerdictFail}, false},
		{"control caught where targeted", ConformRow{Broken: true, Expected: VerdictFail, Verdict: VerdictFail}, true},
		{"control missed where targeted", ConformRow{Broken: true, Expected: VerdictFail, Verdict: VerdictPass}, false},
		{"control caught where not targeted", ConformRow{Broken: true, Expected: VerdictPass, Verdict: VerdictFail}, true},
		{"error", ConformRow{Expected: VerdictPass, Verdict: VerdictPass, Error: "timeout"}, false},
	} {
		if got := tc.row.AsExpected(); got != tc.ok {
			t.Errorf("%s: AsExpected = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestConformMutationScoreAndRoundTrip(t *testing.T) {
	c := &Conformance{RunID: "x", Rows: []ConformRow{
		{Scenario: "a", Broker: "kafka", Strategy: "tx", Expected: VerdictPass, Verdict: VerdictPass},
		{Scenario: "a", Broker: "kafka", Strategy: "broken-split", Broken: true, Expected: VerdictFail, Verdict: VerdictFail},
		{Scenario: "b", Broker: "kafka", Strategy: "broken-split", Broken: true, Expected: VerdictPass, Verdict: VerdictPass},
		{Scenario: "a", Broker: "kafka", Strategy: "broken-no-version", Broken: true, Expected: VerdictFail, Verdict: VerdictPass},
	}}
	dir := t.TempDir()
	if _, err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadConform(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := back.Summary
	if s.BrokenTotal != 2 || s.BrokenCaught != 1 || s.MutationScore != 0.5 || !reflect.DeepEqual(s.Survivors, []string{"broken-no-version"}) || s.Verdict != VerdictFail {
		t.Errorf("summary = %+v", s)
	}
	if len(back.Rows) != 4 || back.SchemaVersion != SchemaVersion {
		t.Errorf("round trip lost rows or schema: %+v", back)
	}
}
