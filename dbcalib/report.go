package dbcalib

import (
	"fmt"
	"io"
	"sort"
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
}

// Summary is a comparison's ratio over the rounds.
type Summary struct {
	Compare  string  `json:"compare"`
	Strategy string  `json:"strategy"`
	Median   float64 `json:"median"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	Rounds   int     `json:"rounds"`
	Goal     float64 `json:"goal"`
	Met      bool    `json:"met"`
	// CPUMedian, CPUMin and CPUMax are the CPU-per-event ratios (0 when
	// not sampled).
	CPUMedian float64 `json:"cpu_median,omitempty"`
	CPUMin    float64 `json:"cpu_min,omitempty"`
	CPUMax    float64 `json:"cpu_max,omitempty"`
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

// summarize takes each comparison's median and range over the rounds.
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
		med, lo, hi := medianRange(r)
		sum := Summary{Compare: k.cmp, Strategy: k.st, Median: med, Min: lo, Max: hi, Rounds: len(r),
			Goal: Goals[k.cmp], Met: Goals[k.cmp] == 0 || med >= Goals[k.cmp]}
		if cr := cpuRatios[k]; len(cr) > 0 {
			sum.CPUMedian, sum.CPUMin, sum.CPUMax = medianRange(cr)
		}
		out = append(out, sum)
	}
	return out
}

// medianRange sorts r and returns its median, minimum and maximum.
func medianRange(r []float64) (med, lo, hi float64) {
	sort.Float64s(r)
	med = r[len(r)/2]
	if len(r)%2 == 0 {
		med = (r[len(r)/2-1] + r[len(r)/2]) / 2
	}
	return med, r[0], r[len(r)-1]
}

// String is "server 21.3 + client 4.2 = 25.5 µs/event".
func (c *CPU) String() string {
	return fmt.Sprintf("server %.1f + client %.1f = %.1f µs/event", c.Server, c.Client, c.Total)
}

// WriteSummary prints the summaries as a table.
func (r *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%-8s %-8s %-22s %-8s %s\n", "COMPARE", "STRATEGY", "RATIO median [min–max]", "GOAL", "")
	for _, s := range r.Summaries {
		what := map[string]string{ComparePGBench: "none / pgbench", ComparePGX: "none / bare pgx loop", CompareAudit: "audit / no audit",
			ComparePrefill: "prefilled / empty inbox", ComparePrune: "retention beside / none"}[s.Compare]
		verdict, goal := "met", fmt.Sprintf("≥ %.2f", s.Goal)
		switch {
		case s.Goal == 0:
			verdict, goal = "measured", "-"
		case !s.Met:
			verdict = "NOT met"
		}
		cpu := ""
		if s.CPUMedian > 0 {
			cpu = fmt.Sprintf("; CPU per event %.3f [%.3f–%.3f]", s.CPUMedian, s.CPUMin, s.CPUMax)
		}
		fmt.Fprintf(w, "%-8s %-8s %.3f [%.3f–%.3f]    %-7s  %s (%s, %d rounds%s)\n", s.Compare, s.Strategy, s.Median, s.Min, s.Max,
			goal, verdict, what, s.Rounds, cpu)
	}
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error { return results.WriteJSON(path, r) }

// Met reports whether every comparison reached its goal.
func (r *Report) Met() bool {
	for _, s := range r.Summaries {
		if !s.Met {
			return false
		}
	}
	return len(r.Summaries) > 0
}

// String names the comparisons for messages.
func (r *Report) String() string {
	var parts []string
	for _, s := range r.Summaries {
		parts = append(parts, fmt.Sprintf("%s/%s %.3f", s.Compare, s.Strategy, s.Median))
	}
	return strings.Join(parts, ", ")
}
