package results

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The comparison as text: the table bench compare prints and its verdict
// line.

// warn writes a warning and its items, one per line, when there are any.
func warn(b *bytes.Buffer, what string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "warning: %s:\n", what)
	for _, d := range items {
		fmt.Fprintf(b, "  %s\n", d)
	}
}

// WriteText prints the comparison as an aligned table followed by the
// verdict line.
func (c *Comparison) WriteText(w io.Writer) error {
	var b bytes.Buffer
	baseName, newName := c.BaseName, c.NewName
	if baseName == "" {
		baseName, newName = runLabel(c.Base), runLabel(c.New)
	}
	fmt.Fprintf(&b, "base: %s\nnew:  %s\n", baseName, newName)
	warn(&b, "different workloads, compared anyway as asked", c.WorkloadDiffs)
	warn(&b, "measured on different machines or servers", c.EnvDiffs)
	fmt.Fprintf(&b, "a change counts beyond %s, when the Mann-Whitney U test over the rounds gives p < %.2f; events/s gates every cell, latencies cells run at a rate\n",
		strconv.FormatFloat(c.Options.MaxRegression*100, 'f', -1, 64)+"%", Alpha)
	if c.Single {
		fmt.Fprintf(&b, "single run: no noise estimate for cells of one round, their findings compare the figures with the threshold alone (bench run --rounds 5 measures the noise)\n")
	}
	b.WriteString("\n")
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tmetric\tbase\tnew\tchange [interval]\ttest\tfinding\t")
	for _, d := range c.Cells {
		name := d.Broker + "/" + d.Strategy
		if d.Broken {
			name += " (negative control)"
		}
		for i, m := range d.Deltas {
			label := ""
			if i == 0 {
				label = name
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", label, m.Metric, side(m.Change.Base, m.format), side(m.Change.New, m.format),
				changeText(m), testText(m), findingText(m))
		}
		mark := ""
		if d.VerdictRegressed {
			mark = "REGRESSION"
		}
		fmt.Fprintf(tw, "\tverdict\t%s\t%s\t\t\t%s\t\n", verdictOrNone(d.BaseVerdict), verdictOrNone(d.NewVerdict), mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(table.String(), "\n") {
		b.WriteString(strings.TrimRight(line, " \n"))
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	if len(c.OnlyBase) > 0 {
		fmt.Fprintf(&b, "\nonly in base (not compared): %s\n", strings.Join(c.OnlyBase, ", "))
	}
	if len(c.OnlyNew) > 0 {
		fmt.Fprintf(&b, "\nonly in new (not compared): %s\n", strings.Join(c.OnlyNew, ", "))
	}
	if len(c.Cells) == 0 {
		fmt.Fprintf(&b, "\nno cell is in both runs: nothing compared\n")
	}
	plans := 0
	for _, d := range c.Cells {
		for _, p := range d.Plans {
			fmt.Fprintf(&b, "\n%s/%s, %s", d.Broker, d.Strategy, p)
			plans++
		}
	}
	if plans > 0 {
		b.WriteString("\n")
	}
	for _, line := range c.Inconclusive {
		fmt.Fprintf(&b, "\ninconclusive: %s", line)
	}
	if len(c.Inconclusive) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("\n")
	b.WriteString(c.Summary())
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

// side is one side's median with its spread.
func side(e Estimate, format func(float64) string) string {
	switch {
	case e.N == 0:
		return "—"
	case e.N == 1:
		return format(e.Median)
	}
	return fmt.Sprintf("%s ±%.0f%%", format(e.Median), 100*e.Spread())
}

// changeText is the change of the medians with its interval.
func changeText(m Delta) string {
	c := m.Change
	if c.Base.N == 0 || c.New.N == 0 || c.Ratio == 0 {
		return "n/a"
	}
	if c.Lo == 0 || c.Hi == 0 {
		return FormatChange(c.Rel())
	}
	return fmt.Sprintf("%s [%s, %s]", FormatChange(c.Rel()), FormatChange(c.Lo-1), FormatChange(c.Hi-1))
}

// testText is the test that judged the change.
func testText(m Delta) string {
	c := m.Change
	switch {
	case c.Base.N == 0 || c.New.N == 0:
		return ""
	case c.Single:
		return "single run"
	}
	return fmt.Sprintf("p=%.3f n=%d+%d", c.P, c.Base.N, c.New.N)
}

// findingText is what the comparison concluded of the metric.
func findingText(m Delta) string {
	if m.Note != "" && m.Change.Base.N == 0 {
		return m.Note
	}
	f := string(m.Change.Finding)
	switch m.Change.Finding {
	case Regression:
		f = "REGRESSION"
	case Improvement:
		f = "improvement"
	}
	if m.Change.Single {
		f += " (single run: no noise estimate)"
	}
	if !m.Gates {
		f += " — " + m.Note
	}
	return f
}

// Summary is the one-line verdict of the comparison.
func (c *Comparison) Summary() string {
	switch {
	case c.Regressed():
		return fmt.Sprintf("REGRESSION: %d check(s): %s", len(c.Regressions), strings.Join(c.Regressions, "; "))
	case len(c.Inconclusive) > 0:
		return fmt.Sprintf("INCONCLUSIVE: no regression shown, but %d gating metric(s) could not be decided in %d compared cell(s): more rounds would tell", len(c.Inconclusive), len(c.Cells))
	}
	return fmt.Sprintf("OK: no significant regression in %d compared cell(s)", len(c.Cells))
}

// runLabel names a run in the comparison's header.
func runLabel(r *Run) string {
	s := r.RunID
	if name := r.WorkloadName(); name != "" {
		s += ", workload " + name
	}
	if !r.StartedAt.IsZero() {
		s += ", " + r.StartedAt.UTC().Format("2006-01-02 15:04 MST")
	}
	if r.Env.GitCommit != "" {
		s += ", commit " + r.Env.GitCommit
	}
	return s
}

// pText is a regression's test, for its line in Regressions.
func pText(c Change) string {
	if c.Single {
		return ", single run"
	}
	return fmt.Sprintf(", p=%.3f n=%d+%d", c.P, c.Base.N, c.New.N)
}
