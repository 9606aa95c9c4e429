package render

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/inboxbench/inboxbench/results"
)

// Markdown writes report.md: every figure of the run as tables, for pull
// requests, issues and terminals. Charts live in report.html; here the
// per-second throughput is a Unicode sparkline. The output is
// deterministic (map keys sorted, no clock reads) so it can be golden-tested.
func Markdown(out io.Writer, r *results.Report) error {
	w := bufio.NewWriter(out)
	md := &mdWriter{w: w, rateCal: r.RateCalibration, rateCalDir: r.RateCalibrationDir}
	switch {
	case r.Run != nil:
		md.run(r.Run)
	case r.Conform != nil:
		fmt.Fprintf(w, "# inboxbench conformance: %s\n\n", r.Conform.RunID)
	case r.Calibration != nil:
		fmt.Fprintf(w, "# inboxbench client calibration: %s\n\n", r.Calibration.RunID)
	}
	if r.Conform != nil {
		md.conform(r.Conform)
	}
	if r.Calibration != nil {
		md.calibration(r.Calibration)
	}
	switch {
	case r.Run != nil:
		md.env(r.Run.Env)
		if err := md.workload(r.Run); err != nil {
			return err
		}
	case r.Conform != nil:
		md.env(r.Conform.Env)
	}
	return w.Flush()
}

type mdWriter struct {
	w *bufio.Writer
	// rateCal is the calibration at rates shown beside the latencies of
	// fixed-rate cells (Report.RateCalibration), found in rateCalDir.
	rateCal    *results.Calibration
	rateCalDir string
}

func (m *mdWriter) p(format string, a ...any) { fmt.Fprintf(m.w, format, a...) }

// table writes a GitHub-flavoured Markdown table; align has one of 'l' or
// 'r' per column (numbers right-aligned so digits line up when rendered).
func (m *mdWriter) table(header []string, align string, rows [][]string) {
	m.p("|")
	for _, h := range header {
		m.p(" %s |", mdEscape(h))
	}
	m.p("\n|")
	for i := range header {
		if i < len(align) && align[i] == 'r' {
			m.p("---:|")
		} else {
			m.p("---|")
		}
	}
	m.p("\n")
	for _, row := range rows {
		m.p("|")
		for _, c := range row {
			m.p(" %s |", mdEscape(c))
		}
		m.p("\n")
	}
	m.p("\n")
}

// section opens a "## heading" section with note for the table of rows,
// and reports whether it did: a run without such rows gets no section.
func (m *mdWriter) section(heading, note string, rows [][]string) bool {
	if len(rows) == 0 {
		return false
	}
	m.p("## %s\n\n%s\n\n", heading, note)
	return true
}

// mdEscape keeps a value inside its table cell: pipes would open a new
// column and newlines would end the row (SQL and examples contain both).
func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

func (m *mdWriter) run(run *results.Run) {
	m.p("# inboxbench report: %s\n\n", run.RunID)
	_, verdict := run.RunVerdict()
	m.p("**Verdict: %s**\n\n", verdict)
	var facts []string
	if name := run.WorkloadName(); name != "" {
		facts = append(facts, fmt.Sprintf("workload `%s`", name))
	}
	if !run.StartedAt.IsZero() {
		facts = append(facts, "started "+run.StartedAt.UTC().Format("2006-01-02 15:04:05 MST"))
	}
	if !run.FinishedAt.IsZero() && run.FinishedAt.After(run.StartedAt) {
		facts = append(facts, "took "+formatSeconds(run.FinishedAt.Sub(run.StartedAt).Seconds()))
	}
	facts = append(facts, fmt.Sprintf("%d cells (broker × strategy)", len(run.Cells)))
	m.p("%s. Charts: report.html beside this file.\n\n", strings.Join(facts, " · "))

	m.summary(run)
	m.rates(run)
	m.rounds(run)
	m.throughput(run)
	m.faults(FaultRows(run))
	m.latency(run)
	m.counters(run)
	m.external(run)
	m.contention(run)
	m.anomalies(run)
}

func (m *mdWriter) summary(run *results.Run) {
	m.p("## Summary\n\n")
	m.p("Latencies are measured from the intended send time (open loop, no coordinated omission); lock-wait share is the share of sampled busy backend states waiting on a heavyweight lock. \"Bound by\" says what set the pace: the broker's publish path (the consumers kept up with a publisher sending as fast as the broker confirmed), the workload's rate, or the consumers (a backlog built up: delivery, handler or database). \"Host CPU\" is how busy the whole machine was: near 100%%, every component (broker, database, harness) competes for the same cores.\n\n")
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		l := c.Latency
		row := []string{c.Broker, c.StrategyLabel(), c.RateText(), run.VsNone(c), c.BoundText(), c.HostCPUText(),
			latencyCell(l.E2E, l.E2E.P50), latencyCell(l.E2E, l.E2E.P99), latencyCell(l.E2E, l.E2E.P999),
			latencyCell(l.Dedup, l.Dedup.P99), results.FormatShare(c.Contention.LockWaitShare), c.VerdictText()}
		if run.SteadyCells() {
			row = append(row, c.SteadyText())
		}
		rows = append(rows, row)
	}
	head, align := []string{"broker", "strategy", "events/s", "vs none", "bound by", "host CPU", "e2e p50", "e2e p99", "e2e p99.9", "dedup p99", "lock-wait share", "verdict"}, "llrrlrrrrrrl"
	if run.SteadyCells() {
		head, align = append(head, "window"), align+"l"
	}
	m.table(head, align, rows)
	if n := roundsNote(run); n != "" {
		m.p("%s\n\n", n)
	}
	if run.Saturated() {
		m.p("%s\n\n", SaturatedNote)
	}
	if notes := results.CellNotes(run); len(notes) > 0 {
		for _, n := range notes {
			m.p("- %s\n", n)
		}
		m.p("\n")
	}
}

// rounds writes every round of a run of several.
func (m *mdWriter) rounds(run *results.Run) {
	if rows := RoundRows(run); m.section("Rounds", roundsIntro, rows) {
		m.table(RoundsHeader, "lrrrrrrrlll", rows)
	}
}

// rates writes the rate search of rate-search cells: the maximum
// sustainable rate, the latency at fractions of it, every step.
func (m *mdWriter) rates(run *results.Run) {
	rows := RateRows(run)
	if !m.section("Maximum sustainable rate", RateNote, rows) {
		return
	}
	m.table(RateHeader, "lrlrrrr", rows)
	for i := range run.Cells {
		c := &run.Cells[i]
		if c.Rate == nil {
			continue
		}
		m.p("### Steps: %s\n\nMSR %s/s, limited by %s.\n\n", c.Name(), results.FormatRate(c.Rate.MSR), LimitText(c.Rate.LimitedBy))
		m.table(StepHeader, "lrrrrrrrrrrl", StepRows(c))
	}
}

func (m *mdWriter) throughput(run *results.Run) {
	m.p("## Throughput over time\n\n")
	m.p("Durable effects per second from the start of consumption (warm-up included in the series, excluded from events/s).\n\n")
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		s := c.Throughput.Series
		if len(s) == 0 {
			rows = append(rows, []string{c.Name(), results.FormatRate(c.Throughput.EventsPerS), "—", "—", "—", "0", ""})
			continue
		}
		sorted := append([]float64(nil), s...)
		sort.Float64s(sorted)
		rows = append(rows, []string{c.Name(), results.FormatRate(c.Throughput.EventsPerS), results.FormatRate(sorted[0]),
			results.FormatRate(median(sorted)), results.FormatRate(sorted[len(sorted)-1]), fmt.Sprint(len(s)), "`" + sparkline(s, 60) + "`"})
	}
	m.table([]string{"cell", "events/s", "min/s", "median/s", "max/s", "seconds", "over time"}, "lrrrrrl", rows)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// sparkline draws a series as block characters scaled from 0 to its max,
// averaging buckets when the series is longer than width.
func sparkline(s []float64, width int) string {
	const blocks = "▁▂▃▄▅▆▇█"
	levels := []rune(blocks)
	if len(s) > width {
		b := make([]float64, width)
		for i := range b {
			lo, hi := i*len(s)/width, (i+1)*len(s)/width
			var sum float64
			for _, v := range s[lo:hi] {
				sum += v
			}
			b[i] = sum / float64(hi-lo)
		}
		s = b
	}
	var mx float64
	for _, v := range s {
		mx = math.Max(mx, v)
	}
	var sb strings.Builder
	for _, v := range s {
		i := 0
		if mx > 0 {
			i = int(math.Round(v / mx * float64(len(levels)-1)))
		}
		sb.WriteRune(levels[max(0, min(i, len(levels)-1))])
	}
	return sb.String()
}

// latencyKinds are the histograms of a cell in reading order.
var latencyKinds = []struct {
	Name, Meaning string
	Get           func(*results.Latencies) results.Summary
}{
	{"e2e", "intended publish time → database commit", func(l *results.Latencies) results.Summary { return l.E2E }},
	{"publish", "send → broker confirm", func(l *results.Latencies) results.Summary { return l.Publish }},
	{"publish_lag", "intended send time → handed to the broker (the publisher's own lateness; at a rate)", func(l *results.Latencies) results.Summary { return l.PublishLag }},
	{"apply", "inbox transaction", func(l *results.Latencies) results.Summary { return l.Apply }},
	{"dedup", "delivery → DUPLICATE decision → ack", func(l *results.Latencies) results.Summary { return l.Dedup }},
}

func summaryRow(s results.Summary) []string {
	if s.Count == 0 {
		return []string{"0", "—", "—", "—", "—", "—"}
	}
	return []string{results.Thousands(s.Count), results.FormatMicros(s.P50), results.FormatMicros(s.P90), results.FormatMicros(s.P99), results.FormatMicros(s.P999), results.FormatMicros(s.Max)}
}

func (m *mdWriter) latency(run *results.Run) {
	m.p("## Latency\n\n")
	var meaning []string
	for _, k := range latencyKinds {
		meaning = append(meaning, fmt.Sprintf("%s = %s", k.Name, k.Meaning))
	}
	m.p("%s.\n\n", strings.Join(meaning, "; "))
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		for _, k := range latencyKinds {
			rows = append(rows, append([]string{c.Name(), k.Name}, summaryRow(k.Get(&c.Latency))...))
		}
	}
	m.table([]string{"cell", "histogram", "count", "p50", "p90", "p99", "p99.9", "max"}, "llrrrrrr", rows)

	rows = nil
	for i := range run.Cells {
		c := &run.Cells[i]
		for _, k := range sortedKeys(c.Latency.ApplyByResult) {
			rows = append(rows, append([]string{c.Name(), k}, summaryRow(c.Latency.ApplyByResult[k])...))
		}
	}
	if len(rows) > 0 {
		m.p("### Apply latency by result\n\n")
		m.table([]string{"cell", "result", "count", "p50", "p90", "p99", "p99.9", "max"}, "llrrrrrr", rows)
	}
	m.calibratedLatency(run)
}

// counterColumns are the counters in the order the article discusses
// them: deliveries, handler executions and durable effects apart.
var counterColumns = []struct {
	Name string
	Get  func(*results.Counters) int64
}{
	{"published", func(c *results.Counters) int64 { return c.Published }},
	{"deliveries", func(c *results.Counters) int64 { return c.Deliveries }},
	{"executions", func(c *results.Counters) int64 { return c.Executions }},
	{"effects", func(c *results.Counters) int64 { return c.Effects }},
	{"duplicates", func(c *results.Counters) int64 { return c.Duplicates }},
	{"redeliveries", func(c *results.Counters) int64 { return c.Redeliveries }},
	{"gaps", func(c *results.Counters) int64 { return c.Gaps }},
	{"parked", func(c *results.Counters) int64 { return c.Parked }},
	{"stale", func(c *results.Counters) int64 { return c.Stale }},
	{"conflicts", func(c *results.Counters) int64 { return c.Conflicts }},
	{"retries", func(c *results.Counters) int64 { return c.Retries }},
	{"errors", func(c *results.Counters) int64 { return c.Errors }},
	{"crashes", func(c *results.Counters) int64 { return c.Crashes }},
	{"rejected", func(c *results.Counters) int64 { return c.Rejected }},
}

func (m *mdWriter) counters(run *results.Run) {
	m.p("## Counters\n\n")
	m.p("Deliveries (what the broker handed over), executions (handler runs) and effects (durable business changes) are counted apart: exactly-once effect means effects = distinct published events, whatever the deliveries.\n\n")
	header := []string{"cell"}
	align := "l"
	for _, c := range counterColumns {
		header = append(header, c.Name)
		align += "r"
	}
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		row := []string{c.Name()}
		for _, col := range counterColumns {
			row = append(row, results.Thousands(col.Get(&c.Counters)))
		}
		rows = append(rows, row)
	}
	m.table(header, align, rows)
}

func (m *mdWriter) contention(run *results.Run) {
	m.p("## Lock contention\n\n")
	m.p("Sampled from pg_stat_activity during each cell. Commits, rollbacks and deadlocks are pg_stat_database deltas for the whole database.\n\n")
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		ct := &c.Contention
		var waits []string
		for _, k := range topWaits(ct.LockWaitSamples) {
			waits = append(waits, fmt.Sprintf("%s %s", k, results.Thousands(ct.LockWaitSamples[k])))
		}
		w := strings.Join(waits, ", ")
		if w == "" {
			w = "none"
		}
		rows = append(rows, []string{c.Name(), results.Thousands(int64(ct.Samples)), results.FormatShare(ct.LockWaitShare), fmt.Sprint(ct.BlockedMax),
			results.Thousands(ct.Deadlocks), results.Thousands(ct.Rollbacks), results.Thousands(ct.Commits), w})
	}
	m.table([]string{"cell", "samples", "lock-wait share", "blocked max", "deadlocks", "rollbacks", "commits", "lock waits by event"},
		"lrrrrrrl", rows)

	rows = nil
	for i := range run.Cells {
		c := &run.Cells[i]
		for j, s := range c.Contention.TopStatements {
			if j == 5 {
				break
			}
			rows = append(rows, []string{c.Name(), results.Thousands(s.Calls), formatMs(s.MeanMs), formatMs(s.TotalMs), "`" + strings.ReplaceAll(compactSQL(s.Query), "`", "'") + "`"})
		}
	}
	if len(rows) > 0 {
		m.p("### Top statements by total time\n\n")
		m.table([]string{"cell", "calls", "mean", "total", "query"}, "lrrrl", rows)
	}
}

// topWaits orders wait events by samples, most first (ties by name).
func topWaits(m map[string]int64) []string {
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	return keys
}

func formatMs(ms float64) string { return results.FormatMicrosFloat(ms * 1000) }

// compactSQL folds whitespace so a statement fits one table row.
func compactSQL(q string) string { return strings.Join(strings.Fields(q), " ") }

func (m *mdWriter) anomalies(run *results.Run) {
	m.p("## Anomalies\n\n")
	var rows [][]string
	var errs []string
	for i := range run.Cells {
		c := &run.Cells[i]
		if c.Error != "" {
			errs = append(errs, fmt.Sprintf("- **%s**: %s", c.Name(), c.Error))
		}
		for _, a := range sortedKeys(c.Invariants.Anomalies) {
			n := c.Invariants.Anomalies[a]
			if n == 0 {
				continue
			}
			rows = append(rows, []string{c.Name(), c.StrategyLabel(), c.VerdictText(), a, results.Thousands(n), examplesText(c.Invariants.Examples[a], 3)})
		}
	}
	if len(rows) == 0 {
		m.p("None: every business event took effect exactly once in every cell.\n\n")
	} else {
		m.p("Each anomaly the checker named, with up to three examples. For a negative control these are the evidence that the checker caught it.\n\n")
		m.table([]string{"cell", "strategy", "verdict", "anomaly", "count", "examples"}, "llllrl", rows)
	}
	if len(errs) > 0 {
		m.p("### Cells that did not complete\n\n%s\n\n", strings.Join(errs, "\n"))
	}
}

func examplesText(ex []string, n int) string {
	if len(ex) == 0 {
		return "—"
	}
	more := ""
	if len(ex) > n {
		more = fmt.Sprintf(" (+%d more)", len(ex)-n)
		ex = ex[:n]
	}
	quoted := make([]string, len(ex))
	for i, e := range ex {
		quoted[i] = "`" + strings.ReplaceAll(e, "`", "'") + "`"
	}
	return strings.Join(quoted, "; ") + more
}

func (m *mdWriter) conform(c *results.Conformance) {
	s := c.Summary
	m.p("## Conformance matrix\n\n")
	m.p("**Conformance: %s**: %d of %d rows as expected; %s.\n\n", s.Verdict, s.AsExpected, s.Rows, mutationText(s))
	mx := newConformMatrix(c.Rows)
	header := []string{"scenario"}
	align := "l"
	for _, col := range mx.Columns {
		h := col.key()
		if col.Broken {
			h += " (negative control)"
		}
		header = append(header, h)
		align += "l"
	}
	var rows [][]string
	for _, sc := range mx.Scenarios {
		row := []string{sc}
		for _, col := range mx.Columns {
			row = append(row, conformOutcome(mx.Cell[[2]string{sc, col.key()}]))
		}
		rows = append(rows, row)
	}
	m.table(header, align, rows)

	rows = nil
	for _, r := range c.Rows {
		detail, got := anomalyList(r.Anomalies), r.Verdict
		if r.Error != "" {
			detail, got = "error: "+r.Error, results.VerdictError
		}
		if detail == "" {
			detail = "none"
		}
		var ex []string
		for _, a := range sortedKeys(r.Examples) {
			ex = append(ex, r.Examples[a]...)
		}
		rows = append(rows, []string{r.Scenario, r.Broker, r.Strategy, expectedText(r), string(got), detail, examplesText(ex, 2), formatSeconds(r.DurationS)})
	}
	m.table([]string{"scenario", "broker", "strategy", "expected", "got", "anomalies", "examples", "time"}, "llllllll", rows)
	m.faults(ConformFaultRows(c.Rows))
}

// expectedText is a row's expectation, with the anomaly a weak-setting
// control must show and the setting.
func expectedText(r results.ConformRow) string {
	if r.MustShow == "" {
		return string(r.Expected)
	}
	t := fmt.Sprintf("%s with %s", r.Expected, r.MustShow)
	if r.Control != "" {
		t += " under " + r.Control
	}
	return t
}

func mutationText(s results.ConformSummary) string {
	if s.BrokenTotal == 0 {
		return "no negative controls ran, so no mutation score"
	}
	t := fmt.Sprintf("mutation score %d/%d (%.0f%%) of broken strategies caught", s.BrokenCaught, s.BrokenTotal, s.MutationScore*100)
	if len(s.Survivors) > 0 {
		t += "; not caught: " + strings.Join(s.Survivors, ", ")
	}
	return t
}

func anomalyList(m map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s ×%s", k, results.Thousands(m[k])))
		}
	}
	return strings.Join(parts, ", ")
}

// kv is one label → value row.
type kv struct{ Key, Value string }

// envRows lists the environment as label/value pairs (shared with HTML).
func envRows(e results.Env) []kv {
	rows := []kv{
		{"Go", e.GoVersion}, {"PostgreSQL", e.Postgres},
	}
	for _, b := range sortedKeys(e.Brokers) {
		rows = append(rows, kv{"broker " + b, e.Brokers[b]})
	}
	for _, c := range sortedKeys(e.Clients) {
		rows = append(rows, kv{"client " + c, e.Clients[c]})
	}
	if e.Durability != nil && e.Durability.Profile != "" {
		rows = append(rows, kv{"durability profile", e.Durability.Profile})
	}
	rows = append(rows, kv{"cores", fmt.Sprint(e.Cores)})
	if e.MemoryMiB > 0 {
		rows = append(rows, kv{"memory", results.Thousands(e.MemoryMiB) + " MiB"})
	}
	rows = append(rows, kv{"OS", e.OS}, kv{"host", e.Hostname}, kv{"git commit", e.GitCommit})
	if !e.Measure {
		rows = append(rows, kv{"measurement", "off (figures not comparable)"})
	}
	if len(e.CommandArg) > 0 {
		rows = append(rows, kv{"command", strings.Join(e.CommandArg, " ")})
	}
	for _, n := range e.Notes {
		rows = append(rows, kv{"note", n})
	}
	out := rows[:0]
	for _, r := range rows {
		if r.Value != "" {
			out = append(out, r)
		}
	}
	return out
}

func (m *mdWriter) env(e results.Env) {
	m.durability(e)
	m.p("## Environment\n\n")
	var rows [][]string
	for _, r := range envRows(e) {
		rows = append(rows, []string{r.Key, r.Value})
	}
	m.table([]string{"", "value"}, "ll", rows)
}

func (m *mdWriter) workload(run *results.Run) error {
	kvs, err := results.FlattenJSON(run.Workload)
	if err != nil {
		return err
	}
	m.p("## Workload\n\n")
	if len(kvs) == 0 {
		m.p("Not recorded.\n")
		return nil
	}
	var rows [][]string
	for _, r := range kvs {
		rows = append(rows, []string{r.Key, r.Value})
	}
	m.table([]string{"setting", "value"}, "ll", rows)
	return nil
}
