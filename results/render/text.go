package render

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/inboxbench/inboxbench/results"
)

// The terminal's writers, beside Markdown and HTML: the summary table
// `bench run` prints and the matrix `bench conform` prints.

// WriteSummary prints broker × strategy → events/s, vs none, what bound
// the cell, host CPU, e2e p50/p99, dedup p99, lock-wait share and verdict,
// then each cell's error and anomalies with examples.
func WriteSummary(w io.Writer, run *results.Run) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	steady := run.SteadyCells()
	head := "BROKER\tSTRATEGY\tEVENTS/S\tvs none\tBOUND BY\tHOST CPU\tE2E P50\tE2E P99\tDEDUP P99\tLOCK WAIT\tVERDICT\t"
	if steady {
		head += "WINDOW\t"
	}
	fmt.Fprintln(tw, head)
	for i, c := range run.Cells {
		verdict := string(c.Invariants.Verdict)
		if c.Broken {
			verdict += " (negative control: FAIL expected)"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", c.Broker, c.Strategy, c.RateText(),
			run.VsNone(&run.Cells[i]), c.BoundText(), c.HostCPUText(), dashMicros(c.Latency.E2E.P50), dashMicros(c.Latency.E2E.P99),
			dashMicros(c.Latency.Dedup.P99), results.FormatShare(c.Contention.LockWaitShare), verdict)
		if steady {
			line += c.SteadyText() + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeRightTable(w, RateHeader, RateRows(run)); err != nil {
		return err
	}
	if err := writeRightTable(w, ExternalHeader, ExternalRows(run)); err != nil {
		return err
	}
	if err := writeFaultTable(w, FaultRows(run)); err != nil {
		return err
	}
	if n := roundsNote(run); n != "" {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	for _, c := range run.Cells {
		if c.Error != "" {
			fmt.Fprintf(w, "\n%s/%s: %s\n", c.Broker, c.Strategy, c.Error)
		}
		for _, f := range c.Failures {
			fmt.Fprintf(w, "%s/%s: %s\n", c.Broker, c.Strategy, results.FailureLine(f))
		}
		for _, n := range sortedKeys(c.Invariants.Anomalies) {
			if k := c.Invariants.Anomalies[n]; k > 0 {
				fmt.Fprintf(w, "%s/%s: %s × %d, e.g. %s\n", c.Broker, c.Strategy, n, k, strings.Join(c.Invariants.Examples[n], "; "))
			}
		}
	}
	return nil
}

// writeRightTable prints rows under header as a terminal table of
// right-aligned columns after a blank line; nothing without rows.
func writeRightTable(w io.Writer, header []string, rows [][]string) error {
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(header, "\t"))+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	return tw.Flush()
}

// roundsNote says how the figures of a run of several rounds are
// summarised, and how each cell's warm-up rounds went; "" for one round
// without warm-up.
func roundsNote(run *results.Run) string {
	var parts []string
	if run.Rounds > 1 {
		parts = append(parts, fmt.Sprintf("Each cell was measured in %d rounds, interleaved (each cell in every place of a round equally often over the rounds): figures are the medians, ± how far the median's confidence interval (%s) reaches from it, and vs none the median of the per-round ratios to the baseline with its interval; a cell whose rate rose from round to round beyond chance is not steady — still warming up — and one whose interval reaches beyond ±%.0f%% is not steady either: its rounds disagree, and a second run may land anywhere in that interval.",
			run.Rounds, confidenceText(run.Rounds), 100*results.RoundsSpreadMax))
	}
	if len(run.Warmup) > 0 {
		ws := make([]string, len(run.Warmup))
		for i := range run.Warmup {
			ws[i] = run.Warmup[i].Text()
		}
		parts = append(parts, "Warm-up rounds, not kept: "+strings.Join(ws, "; ")+".")
	}
	return strings.Join(parts, " ")
}

// confidenceText is the level a median's interval has over n rounds.
func confidenceText(n int) string {
	e := results.EstimateOf(make([]float64, n))
	return fmt.Sprintf("%.0f%%", 100*e.Confidence)
}

func dashMicros(v int64) string {
	if v == 0 {
		return "-"
	}
	return results.FormatMicros(v)
}

// WriteMatrix prints scenario × broker × strategy with the expected and
// actual verdict, and the anomalies or error of each row.
func WriteMatrix(w io.Writer, rows []results.ConformRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSCENARIO\tBROKER\tSTRATEGY\tEXPECTED\tVERDICT\tANOMALIES / ERROR")
	for _, r := range rows {
		mark := ""
		if !r.AsExpected() {
			mark = "  <-- not as expected"
		}
		detail := r.Error
		if r.Verdict == results.VerdictNA {
			detail = r.Reason
		}
		if detail == "" {
			var parts []string
			for _, name := range sortedKeys(r.Anomalies) {
				if n := r.Anomalies[name]; n > 0 {
					ex := ""
					if len(r.Examples[name]) > 0 {
						ex = " e.g. " + r.Examples[name][0]
					}
					parts = append(parts, fmt.Sprintf("%s=%d%s", name, n, ex))
				}
			}
			detail = strings.Join(parts, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%s\n", r.Scenario, r.Broker, r.Strategy, r.Expected, r.Verdict, detail, mark)
	}
	return tw.Flush()
}
