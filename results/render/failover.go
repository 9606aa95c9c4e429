package render

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/go-analyze/charts"

	"github.com/inboxbench/inboxbench/results"
)

// The faults a cell injected (failover faults, broker restarts, killed
// connections) with what each cost the stream, in every writer, and the
// per-second series they were measured on with each fault marked.

// FaultNote says how the fault table's figures are measured.
const FaultNote = "Each fault a cell injected, with when it hit (seconds after the stream started) and what it cost: publish and consume outage run from the fault to the first whole second back at half the pre-fault rate (the mean of up to 10 seconds before it); degraded counts the seconds below that half until the fault's action ended (a rolling restart dips more than once); errors, retries, redeliveries and duplicates absorbed by the inbox are counted from the fault to the next one or the end; e2e p99.9 is over the events that took effect in the minute around the fault."

// FaultHeader and FaultRows are the fault table.
var FaultHeader = []string{"cell", "fault", "at", "what it did", "publish outage", "consume outage", "degraded pub/cons", "publish errors", "publish retries", "redeliveries", "duplicates", "e2e p99.9"}

// FaultRows returns one row per fault of every cell of run.
func FaultRows(run *results.Run) [][]string {
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		for _, f := range c.Faults {
			rows = append(rows, faultRow(c.Name(), f))
		}
	}
	return rows
}

// ConformFaultRows returns one row per fault of every conformance row.
func ConformFaultRows(rows []results.ConformRow) [][]string {
	var out [][]string
	for _, r := range rows {
		for _, f := range r.Faults {
			out = append(out, faultRow(r.Scenario+" "+r.Broker+"/"+r.Strategy, f))
		}
	}
	return out
}

func faultRow(cell string, f results.Fault) []string {
	what := strings.Join(f.What, "; ")
	if f.Error != "" {
		what += " — failed: " + f.Error
	}
	row := []string{cell, f.Name, fmt.Sprintf("%.1fs", f.AtS), what}
	o := f.Outage
	if o == nil {
		return append(row, "-", "-", "-", "-", "-", "-", "-", "-")
	}
	n := results.Thousands
	return append(row, outageText(o.PublishOutageS), outageText(o.ConsumeOutageS),
		fmt.Sprintf("%ds / %ds", o.PublishDegradedS, o.ConsumeDegradedS),
		n(o.PublishErrors), n(o.PublishRetries), n(o.Redeliveries), n(o.Duplicates), dashMicros(o.E2EP999))
}

// outageText is an outage in seconds, or says the rate never came back.
func outageText(s *float64) string {
	if s == nil {
		return "not back before the end"
	}
	return fmt.Sprintf("%.1fs", *s)
}

// writeFaultTable prints rows as the terminal's fault table.
func writeFaultTable(w io.Writer, rows [][]string) error {
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(FaultHeader, "\t")))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// WriteConformFaults prints the fault table of a conformance run's rows
// (nothing when no scenario injected a fault it measured).
func WriteConformFaults(w io.Writer, rows []results.ConformRow) error {
	return writeFaultTable(w, ConformFaultRows(rows))
}

// faults writes the fault table of a run.
func (m *mdWriter) faults(rows [][]string) {
	if m.section("Faults and their outage", FaultNote, rows) {
		m.table(FaultHeader, "llllrrrrrrrr", rows)
	}
}

// faultChart draws a timeline: published and consumed per second, the
// faults as bars up to the top of the chart at the second each hit in.
func faultChart(id, name string, tl *results.Timeline, faults []results.Fault) (*chart, error) {
	if tl == nil || len(tl.Published) == 0 || len(faults) == 0 {
		return nil, nil
	}
	n := max(len(tl.Published), len(tl.Effects))
	top := 1.0
	for _, s := range [][]int64{tl.Published, tl.Effects} {
		for _, v := range s {
			top = max(top, float64(v))
		}
	}
	marks := make([]float64, n)
	for i := range marks {
		marks[i] = charts.GetNullValue()
	}
	labels := make([]string, n)
	for i := range labels {
		labels[i] = strconv.Itoa(i) + "s"
	}
	var hit []string
	for _, f := range faults {
		if at := int(math.Floor(f.AtS)); at >= 0 && at < n {
			marks[at] = top
			hit = append(hit, fmt.Sprintf("%s at %.1fs", f.Name, f.AtS))
		}
	}
	opt := charts.ChartOption{OutputFormat: charts.ChartOutputSVG, Width: wideW, Height: halfH,
		SeriesList: charts.GenericSeriesList{
			{Type: charts.ChartTypeLine, Name: "published (confirmed) per second", Values: nullPad(floatsOf(tl.Published), n)},
			{Type: charts.ChartTypeLine, Name: "consumed (took effect) per second", Values: nullPad(floatsOf(tl.Effects), n)},
			{Type: charts.ChartTypeBar, Name: "fault", Values: marks},
		},
		Legend:          legend([]string{"published (confirmed) per second", "consumed (took effect) per second", "fault"}),
		XAxis:           charts.XAxisOption{Labels: labels, Title: "seconds since the stream started", BoundaryGap: charts.Ptr(false)},
		YAxis:           []charts.YAxisOption{{Title: "messages per second", Min: charts.Ptr(0.0), ValueFormatter: axisNumber}},
		Symbol:          charts.Symbol{Shape: charts.SymbolNone},
		LineStrokeWidth: 1.6,
		BarSize:         0.3,
	}
	p, err := charts.Render(opt)
	svg, err := svgOf(p, err)
	if err != nil {
		return nil, fmt.Errorf("fault chart of %s: %w", name, err)
	}
	return &chart{ID: id, Title: "Faults over time: " + name,
		Caption: "Messages confirmed by the broker and events that took effect, per second; the bars mark the second each fault hit in (" + strings.Join(hit, ", ") + ").",
		SVG:     svg, Wide: true}, nil
}

func floatsOf(s []int64) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

// faultView is the HTML section of a run's or a conformance run's faults.
type faultView struct {
	Note   string
	Header []string
	Rows   [][]string
	Charts []*chart
}

// newRunFaultView is the faults of a run's cells (nil without any).
func newRunFaultView(run *results.Run) (*faultView, error) {
	rows := FaultRows(run)
	if len(rows) == 0 {
		return nil, nil
	}
	v := &faultView{Note: FaultNote, Header: FaultHeader, Rows: rows}
	for i := range run.Cells {
		c := &run.Cells[i]
		ch, err := faultChart(fmt.Sprintf("faults-%d", i), c.Name(), c.Timeline, c.Faults)
		if err != nil {
			return nil, err
		}
		if ch != nil {
			v.Charts = append(v.Charts, ch)
		}
	}
	return v, nil
}

// newConformFaultView is the faults of a conformance run's rows.
func newConformFaultView(rows []results.ConformRow) (*faultView, error) {
	fr := ConformFaultRows(rows)
	if len(fr) == 0 {
		return nil, nil
	}
	v := &faultView{Note: FaultNote, Header: FaultHeader, Rows: fr}
	for i, r := range rows {
		ch, err := faultChart(fmt.Sprintf("conform-faults-%d", i), r.Scenario+" "+r.Broker+"/"+r.Strategy, r.Timeline, r.Faults)
		if err != nil {
			return nil, err
		}
		if ch != nil {
			v.Charts = append(v.Charts, ch)
		}
	}
	return v, nil
}
