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
	fmt.Fprintln(tw, "BROKER\tSTRATEGY\tEVENTS/S\tvs none\tBOUND BY\tHOST CPU\tE2E P50\tE2E P99\tDEDUP P99\tLOCK WAIT\tVERDICT\t")
	for i, c := range run.Cells {
		verdict := c.Invariants.Verdict
		if c.Broken {
			verdict += " (negative control: FAIL expected)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Broker, c.Strategy, results.FormatRate(c.Throughput.EventsPerS),
			run.VsNone(&run.Cells[i]), c.BoundText(), c.HostCPUText(), dashMicros(c.Latency.E2E.P50), dashMicros(c.Latency.E2E.P99),
			dashMicros(c.Latency.Dedup.P99), results.FormatShare(c.Contention.LockWaitShare), verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rows := RateRows(run); len(rows) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(RateHeader, "\t"))+"\t")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
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
