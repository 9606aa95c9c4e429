package dbcalib

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/workload"
)

// Sample is one side-by-side measurement.
type Sample struct {
	Round    int    `json:"round"`
	Compare  string `json:"compare"`
	Strategy string `json:"strategy"`
	// Subject is the measured side (the none cell; the audited cell),
	// Reference the other (pgbench; the unaudited cell), in events/s.
	Subject   float64 `json:"subject_events_per_s"`
	Reference float64 `json:"reference_events_per_s"`
	Ratio     float64 `json:"ratio"`
	Audit     string  `json:"audit"`
	// HostCPUBusy is the host's busy share during the none cell(s).
	HostCPUBusy float64 `json:"host_cpu_busy"`
	// SubjectP99 and ReferenceP99 are the none cells' end-to-end p99, and
	// the Apply ones their inbox transaction's p99, in µs (0 for pgbench).
	SubjectP99        int64 `json:"subject_e2e_p99_us,omitempty"`
	ReferenceP99      int64 `json:"reference_e2e_p99_us,omitempty"`
	SubjectApplyP99   int64 `json:"subject_apply_p99_us,omitempty"`
	ReferenceApplyP99 int64 `json:"reference_apply_p99_us,omitempty"`
	// SubjectCPU and ReferenceCPU are each side's CPU per event (cpu.go),
	// when the server runs on this host; CPURatio is reference over
	// subject: the throughput ratio a machine with nothing else to do
	// would show.
	SubjectCPU   *CPU    `json:"subject_cpu,omitempty"`
	ReferenceCPU *CPU    `json:"reference_cpu,omitempty"`
	CPURatio     float64 `json:"cpu_ratio,omitempty"`
	// SubjectFirst says the subject ran before the reference in this
	// round: the order alternates from round to round.
	SubjectFirst bool `json:"subject_first,omitempty"`
}

// Summary is a comparison's ratio over the rounds: its median with the
// median's confidence interval (results.EstimateOf), and the goal's
// verdict on that interval.
type Summary struct {
	Compare  string  `json:"compare"`
	Strategy string  `json:"strategy"`
	Median   float64 `json:"median"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	// Lo and Hi bound the median at Confidence (the rounds' range at the
	// level it has with fewer than 6 rounds); all zero from one round.
	Lo         float64 `json:"lo,omitempty"`
	Hi         float64 `json:"hi,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
	Rounds     int     `json:"rounds"`
	Goal       float64 `json:"goal"`
	// Verdict is met, not met or undecided for a comparison with a goal
	// (measured without one); Met is true unless it is "not met" or
	// "undecided".
	Verdict Verdict `json:"verdict,omitempty"`
	Met     bool    `json:"met"`
	// Why explains a single round's verdict or an undecided one.
	Why string `json:"why,omitempty"`
	// CPUMedian, CPUMin and CPUMax are the CPU-per-event ratios (0 when
	// not sampled), CPULo and CPUHi their median's interval.
	CPUMedian float64 `json:"cpu_median,omitempty"`
	CPUMin    float64 `json:"cpu_min,omitempty"`
	CPUMax    float64 `json:"cpu_max,omitempty"`
	CPULo     float64 `json:"cpu_lo,omitempty"`
	CPUHi     float64 `json:"cpu_hi,omitempty"`
}

// Verdict is what a comparison's rounds say about its goal.
type Verdict string

const (
	// Met: the interval's lower bound reaches the goal (one round: the
	// value does).
	Met Verdict = "met"
	// NotMet: the interval's upper bound stays below the goal (one round:
	// the value does).
	NotMet Verdict = "not met"
	// Undecided: the goal lies inside the interval; more rounds narrow it.
	Undecided Verdict = "undecided"
	// Measured: a comparison without a goal.
	Measured Verdict = "measured"
)

// judge is the goal's verdict on the estimate of a comparison's ratio.
func judge(e results.Estimate, goal float64) (Verdict, string) {
	switch {
	case goal == 0:
		return Measured, ""
	case e.N == 1 && e.Median >= goal:
		return Met, "single round: no interval; judged by the value"
	case e.N == 1:
		return NotMet, "single round: no interval; judged by the value"
	case e.Lo >= goal:
		return Met, ""
	case e.Hi < goal:
		return NotMet, ""
	}
	return Undecided, fmt.Sprintf("the goal %.2f lies inside the %.0f%% interval [%.3f–%.3f]: more rounds narrow it", goal, 100*e.Confidence, e.Lo, e.Hi)
}

// SchemaVersion is the shape version of the JSON report (--json),
// results/schema/calibrate-db.schema.json; bumped on an incompatible change.
const SchemaVersion = 1

// Report is a calibration's outcome.
type Report struct {
	SchemaVersion int            `json:"schema_version"`
	StartedAt     time.Time      `json:"started_at"`
	Env           results.Env    `json:"env"`
	Workload      *workload.Spec `json:"workload"`
	Events        map[string]int `json:"events"` // events of each strategy's none cells
	Samples       []Sample       `json:"samples"`
	Summaries     []Summary      `json:"summaries"`
	// PGBench is each twin's pgbench command line (the URL left out).
	PGBench map[string][]string `json:"pgbench,omitempty"`
	Scripts map[string]string   `json:"scripts,omitempty"`
}

// summarize takes each comparison's median, interval and range over the
// rounds, and judges its goal on the interval.
func summarize(samples []Sample) []Summary {
	type key struct{ cmp, st string }
	var order []key
	ratios, cpuRatios := map[key][]float64{}, map[key][]float64{}
	for _, s := range samples {
		k := key{s.Compare, s.Strategy}
		if _, ok := ratios[k]; !ok {
			order = append(order, k)
		}
		ratios[k] = append(ratios[k], s.Ratio)
		if s.CPURatio > 0 {
			cpuRatios[k] = append(cpuRatios[k], s.CPURatio)
		}
	}
	var out []Summary
	for _, k := range order {
		r := ratios[k]
		e := results.EstimateOf(r)
		sum := Summary{Compare: k.cmp, Strategy: k.st, Median: e.Median, Min: slices.Min(r), Max: slices.Max(r),
			Lo: e.Lo, Hi: e.Hi, Confidence: e.Confidence, Rounds: len(r), Goal: Goals[k.cmp]}
		sum.Verdict, sum.Why = judge(e, sum.Goal)
		sum.Met = sum.Verdict == Met || sum.Verdict == Measured
		if cr := cpuRatios[k]; len(cr) > 0 {
			ce := results.EstimateOf(cr)
			sum.CPUMedian, sum.CPUMin, sum.CPUMax, sum.CPULo, sum.CPUHi = ce.Median, slices.Min(cr), slices.Max(cr), ce.Lo, ce.Hi
		}
		out = append(out, sum)
	}
	return out
}

// String is "server 21.3 + client 4.2 = 25.5 µs/event".
func (c *CPU) String() string {
	return fmt.Sprintf("server %.1f + client %.1f = %.1f µs/event", c.Server, c.Client, c.Total)
}

// WriteSummary prints the summaries as a table: each ratio's median with
// its interval, and the goal's verdict on the interval.
func (r *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%-8s %-8s %-28s %-7s %-10s %s\n", "COMPARE", "STRATEGY", "RATIO median [interval]", "GOAL", "VERDICT", "")
	rounds := 0
	for _, s := range r.Summaries {
		what := map[string]string{ComparePGBench: "none / pgbench", ComparePGX: "none / bare pgx loop", CompareAudit: "audit / no audit",
			ComparePrefill: "prefilled / empty inbox", ComparePrune: "retention beside / none"}[s.Compare]
		goal := fmt.Sprintf("≥ %.2f", s.Goal)
		if s.Goal == 0 {
			goal = "-"
		}
		ratio := fmt.Sprintf("%.3f", s.Median)
		if s.Rounds > 1 {
			ratio += fmt.Sprintf(" [%.3f–%.3f] %.0f%%", s.Lo, s.Hi, 100*s.Confidence)
		}
		cpu := ""
		if s.CPUMedian > 0 {
			cpu = fmt.Sprintf("; CPU per event %.3f", s.CPUMedian)
			if s.Rounds > 1 && s.CPUHi > 0 {
				cpu += fmt.Sprintf(" [%.3f–%.3f]", s.CPULo, s.CPUHi)
			}
		}
		verdict := string(s.Verdict)
		if s.Verdict == NotMet {
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "%-8s %-8s %-28s %-7s %-10s %s (%d rounds%s)\n", s.Compare, s.Strategy, ratio, goal, verdict, what, s.Rounds, cpu)
		if s.Why != "" {
			fmt.Fprintf(w, "%-8s %-8s %s\n", "", "", s.Why)
		}
		rounds = max(rounds, s.Rounds)
	}
	fmt.Fprintf(w, "\nIn brackets: %s. A goal is met when the interval's lower bound reaches it, not met when its upper bound stays below, undecided otherwise.\n", results.LevelText(rounds))
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error { return results.WriteJSON(path, r) }

// Met reports whether no comparison's goal was judged not met (an
// undecided goal is not a failure: WriteSummary says it needs more
// rounds).
func (r *Report) Met() bool {
	for _, s := range r.Summaries {
		if s.Verdict == NotMet {
			return false
		}
	}
	return len(r.Summaries) > 0
}

// String names the comparisons for messages.
func (r *Report) String() string {
	var parts []string
	for _, s := range r.Summaries {
		parts = append(parts, fmt.Sprintf("%s/%s %.3f %s", s.Compare, s.Strategy, s.Median, s.Verdict))
	}
	return strings.Join(parts, ", ")
}
