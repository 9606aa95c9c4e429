package dbcalib

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/brokers/none"
	"github.com/inboxbench/inboxbench/results"
)

// A goal is judged on the interval of the median: met when its lower
// bound reaches the goal, not met when its upper bound stays below,
// undecided when the goal lies inside; one round is judged by its value
// and says so.
func TestGoalVerdicts(t *testing.T) {
	for _, tc := range []struct {
		ratios []float64
		goal   float64
		want   Verdict
		why    string
	}{
		{[]float64{0.97, 0.99, 0.98}, 0.95, Met, ""},
		{[]float64{0.90, 0.92, 0.91, 0.89, 0.93, 0.90, 0.91}, 0.95, NotMet, ""},
		{[]float64{0.90, 0.99, 0.96}, 0.95, Undecided, "lies inside the 75% interval"},
		{[]float64{0.96}, 0.95, Met, "single round: no interval"},
		{[]float64{0.94}, 0.95, NotMet, "single round: no interval"},
		{[]float64{0.5, 1.5}, 0, Measured, ""},
	} {
		got, why := judge(results.EstimateOf(tc.ratios), tc.goal)
		if got != tc.want || !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
			t.Errorf("%v against %.2f: %s (%q), want %s (%q)", tc.ratios, tc.goal, got, why, tc.want, tc.why)
		}
	}
}

// summarize takes the median with its interval per comparison and
// strategy; the report gates only on "not met".
func TestSummarizeIntervals(t *testing.T) {
	var samples []Sample
	for i, r := range []float64{0.90, 0.99, 0.96} {
		samples = append(samples, Sample{Round: i + 1, Compare: ComparePGBench, Strategy: "tx", Ratio: r, CPURatio: r + 0.01})
	}
	for i, r := range []float64{0.80, 0.82, 0.81} {
		samples = append(samples, Sample{Round: i + 1, Compare: CompareAudit, Strategy: "tx", Ratio: r})
	}
	sums := summarize(samples)
	if len(sums) != 2 {
		t.Fatalf("%d summaries", len(sums))
	}
	pg, audit := sums[0], sums[1]
	if pg.Median != 0.96 || pg.Lo != 0.90 || pg.Hi != 0.99 || pg.Confidence != 0.75 || pg.Verdict != Undecided || pg.Met {
		t.Errorf("pgbench summary %+v", pg)
	}
	if pg.CPUMedian != 0.97 || pg.CPULo != 0.91 || pg.CPUHi != 1.0 {
		t.Errorf("CPU interval %v [%v–%v]", pg.CPUMedian, pg.CPULo, pg.CPUHi)
	}
	if audit.Verdict != NotMet || audit.Met {
		t.Errorf("audit summary %+v", audit)
	}
	rep := &Report{Summaries: []Summary{pg}}
	if !rep.Met() {
		t.Error("an undecided goal failed the report")
	}
	rep.Summaries = sums
	if rep.Met() {
		t.Error("a goal not met passed the report")
	}
	var b bytes.Buffer
	rep.WriteSummary(&b)
	for _, want := range []string{"0.960 [0.900–0.990] 75%", "undecided", "NOT MET", "range of 3 rounds (75% interval of the median)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// The twin round's order alternates and keeps each comparison's sides
// adjacent: none is in the middle of pgbench and pgx, never always last.
func TestTwinOrderAlternates(t *testing.T) {
	both := []string{ComparePGBench, ComparePGX}
	for _, tc := range []struct {
		round int
		refs  []string
		want  []string
	}{
		{1, both, []string{ComparePGBench, none.Name, ComparePGX}},
		{2, both, []string{ComparePGX, none.Name, ComparePGBench}},
		{1, []string{ComparePGX}, []string{ComparePGX, none.Name}},
		{2, []string{ComparePGX}, []string{none.Name, ComparePGX}},
	} {
		if got := twinOrder(tc.round, tc.refs); !slices.Equal(got, tc.want) {
			t.Errorf("round %d %v: %v, want %v", tc.round, tc.refs, got, tc.want)
		}
	}
	for _, ref := range both {
		if noneFirst(1, both, ref) == noneFirst(2, both, ref) {
			t.Errorf("%s: the none cell ran on the same side of it in rounds 1 and 2", ref)
		}
	}
}
