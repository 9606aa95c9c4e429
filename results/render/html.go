package render

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/inboxbench/inboxbench/results"
)

// report.html is one self-contained file: inline CSS, charts as inline
// SVG rendered in Go, no script, no font or stylesheet fetched from
// anywhere, so it opens offline from disk, as a CI artifact or an email
// attachment, and renders the same in ten years.

//go:embed report.html.tmpl
var htmlTemplate string

// pageTemplate holds what report.html and the published site share: the
// style sheet, the content security policy, the chart figure.
//
//go:embed page.tmpl
var pageTemplate string

var pageFuncs = template.FuncMap{
	"svg": func(s string) template.HTML { return template.HTML(s) }, // rendered by go-analyze/charts, which escapes text
}

var reportTmpl = withPage(template.Must(template.New("report").Funcs(pageFuncs).Parse(htmlTemplate)))

// withPage adds the shared definitions to a page template.
func withPage(t *template.Template) *template.Template {
	template.Must(t.New("page").Parse(pageTemplate))
	return t
}

// HTML writes report.html.
func HTML(w io.Writer, r *results.Report) error {
	v, err := newHTMLView(r)
	if err != nil {
		return err
	}
	if err := reportTmpl.Execute(w, v); err != nil {
		return fmt.Errorf("report.html template: %w", err)
	}
	return nil
}

// htmlView is everything the template shows, already formatted: the
// template only lays it out.
type htmlView struct {
	Title   string
	RunID   string
	Banners []banner
	Facts   []string
	HasRun  bool
	Summary []summaryRowView
	// Steady: some cell was measured at steady state (a window column);
	// RoundsNote says how rounds were summarised.
	Steady     bool
	RoundsNote string
	Charts     *runCharts
	Latency    []latencyRowView
	ByResult   []latencyRowView
	Counters   counterTableView
	Contention []contentionRowView
	Statements []statementView
	Anomalies  []anomalyView
	Errors     []kv
	Conform    *conformView
	Calib      *calibrationView
	// CalibLatency is the fixed-rate cells' latency beside a calibration
	// at rates (nil without one).
	CalibLatency *calibratedLatencyView
	Durability   *durabilityView
	Rates        *rateView
	// Faults are the run's faults and their outage, ConformFaults the
	// conformance rows' (failover.go).
	Faults        *faultView
	ConformFaults *faultView
	// Rounds are every round of a run of several (RoundRows).
	Rounds       [][]string
	RoundsHeader []string
	RoundsIntro  string
	Saturated    string
	Notes        []string
	Env          []kv
	Workload     []results.KV
}

// banner is one headline verdict: the run's, and the conformance run's
// when conform.json is present; each is judged on its own.
type banner struct {
	OK   bool
	Text string
}

type verdictView struct {
	Text  string
	Class string // pass, fail, caught, missed, error, unchecked
}

func cellVerdict(c *results.Cell) verdictView {
	class := map[results.Outcome]string{results.OutcomePass: "pass", results.OutcomeCaught: "caught", results.OutcomeUnchecked: "unchecked",
		results.OutcomeFail: "fail", results.OutcomeNotCaught: "missed", results.OutcomeError: "error"}[c.Outcome()]
	return verdictView{Text: c.VerdictText(), Class: class}
}

type summaryRowView struct {
	Broker, Strategy                                          string
	Broken                                                    bool
	Rate, VsNone, Bound, CPU, P50, P99, P999, DedupP99, Share string
	Window                                                    string
	NotSteady                                                 bool
	Verdict                                                   verdictView
}

type latencyRowView struct {
	Cell, Kind, Meaning             string
	Count, P50, P90, P99, P999, Max string
	First                           bool // first row of a cell: draws a separator
}

type counterTableView struct {
	Header []string
	Rows   [][]string
}

type contentionRowView struct {
	Cell, Samples, Share, BlockedMax, Deadlocks, Rollbacks, Commits string
	Waits                                                           []kv
}

type statementView struct {
	Cell, Calls, Mean, Total, Query string
}

type anomalyView struct {
	Cell, Strategy, Name, Count string
	Verdict                     verdictView
	Examples                    []string
	More                        int
}

// rateView is the rate search of the run's rate-search cells.
type rateView struct {
	Note       string
	Header     []string
	Rows       [][]string
	StepHeader []string
	Cells      []rateCellView
}

type rateCellView struct {
	Name, Summary string
	Rows          [][]string
}

func newRateView(run *results.Run) *rateView {
	rows := RateRows(run)
	if len(rows) == 0 {
		return nil
	}
	v := &rateView{Note: RateNote, Header: RateHeader, Rows: rows, StepHeader: StepHeader}
	for i := range run.Cells {
		c := &run.Cells[i]
		if c.Rate != nil {
			v.Cells = append(v.Cells, rateCellView{Name: c.Name(), Rows: StepRows(c),
				Summary: fmt.Sprintf("MSR %s/s, limited by %s.", results.FormatRate(c.Rate.MSR), LimitText(c.Rate.LimitedBy))})
		}
	}
	return v
}

type conformView struct {
	OK       bool
	Summary  string
	Columns  []string
	Broken   []bool
	Rows     []conformRowView
	Details  []conformDetailView
	Mutation string
}

type conformRowView struct {
	Scenario string
	Cells    []verdictView
}

type conformDetailView struct {
	Scenario, Broker, Strategy, Expected, Got, Anomalies, Time string
	Class                                                      string
	Examples                                                   []string
}

func newHTMLView(r *results.Report) (*htmlView, error) {
	v := &htmlView{}
	if r.Run != nil {
		if err := v.fillRun(r.Run); err != nil {
			return nil, err
		}
		v.Env = envRows(r.Run.Env)
		if r.RateCalibration != nil {
			v.CalibLatency = newCalibratedLatencyView(r.Run, r.RateCalibration, r.RateCalibrationDir)
		}
	} else if r.Conform != nil {
		v.RunID = r.Conform.RunID
		v.Title = "inboxbench conformance: " + r.Conform.RunID
		v.Env = envRows(r.Conform.Env)
	} else if r.Calibration != nil {
		v.RunID = r.Calibration.RunID
		v.Title = "inboxbench client calibration: " + r.Calibration.RunID
	}
	if r.Calibration != nil {
		v.Calib = newCalibrationView(r.Calibration)
	}
	var env *results.Env
	if r.Run != nil {
		env = &r.Run.Env
	} else if r.Conform != nil {
		env = &r.Conform.Env
	}
	if env != nil && env.Durability != nil && len(env.Durability.Settings) > 0 {
		v.Durability = &durabilityView{Intro: durabilityIntro(*env), Header: durabilityHeader, Rows: durabilityRows(*env)}
	}
	if r.Conform != nil {
		v.Conform = newConformView(r.Conform)
		v.Banners = append(v.Banners, banner{OK: v.Conform.OK, Text: v.Conform.Summary})
		var err error
		if v.ConformFaults, err = newConformFaultView(r.Conform.Rows); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (v *htmlView) fillRun(run *results.Run) error {
	v.HasRun = true
	v.RunID = run.RunID
	v.Title = "inboxbench report: " + run.RunID
	ok, text := run.RunVerdict()
	v.Banners = append(v.Banners, banner{OK: ok, Text: "Run " + text})
	if name := run.WorkloadName(); name != "" {
		v.Facts = append(v.Facts, "workload "+name)
	}
	if !run.StartedAt.IsZero() {
		v.Facts = append(v.Facts, "started "+run.StartedAt.UTC().Format("2006-01-02 15:04:05 MST"))
	}
	if run.FinishedAt.After(run.StartedAt) && !run.StartedAt.IsZero() {
		v.Facts = append(v.Facts, "took "+formatSeconds(run.FinishedAt.Sub(run.StartedAt).Seconds()))
	}
	v.Facts = append(v.Facts, fmt.Sprintf("%d cells (broker × strategy)", len(run.Cells)))

	var err error
	if v.Charts, err = buildCharts(run); err != nil {
		return err
	}
	v.Rates = newRateView(run)
	if v.Faults, err = newRunFaultView(run); err != nil {
		return err
	}
	if v.Rounds = RoundRows(run); len(v.Rounds) > 0 {
		v.RoundsHeader, v.RoundsIntro = RoundsHeader, roundsIntro
	}
	if run.Saturated() {
		v.Saturated = SaturatedNote
	}
	v.Notes = results.CellNotes(run)
	v.Steady, v.RoundsNote = run.SteadyCells(), roundsNote(run)
	for i := range run.Cells {
		c := &run.Cells[i]
		l := &c.Latency
		v.Summary = append(v.Summary, summaryRowView{Broker: c.Broker, Strategy: c.Strategy, Broken: c.Broken,
			Rate: c.RateText(), VsNone: run.VsNone(c), Bound: c.BoundText(), CPU: c.HostCPUText(), P50: latencyCell(l.E2E, l.E2E.P50), P99: latencyCell(l.E2E, l.E2E.P99),
			P999: latencyCell(l.E2E, l.E2E.P999), DedupP99: latencyCell(l.Dedup, l.Dedup.P99),
			Share: results.FormatShare(c.Contention.LockWaitShare), Verdict: cellVerdict(c),
			Window: c.SteadyText(), NotSteady: strings.HasPrefix(c.SteadyText(), "NOT")})
		for j, k := range latencyKinds {
			v.Latency = append(v.Latency, latencyRow(c.Name(), k.Name, k.Meaning, k.Get(l), j == 0))
		}
		for j, k := range sortedKeys(l.ApplyByResult) {
			v.ByResult = append(v.ByResult, latencyRow(c.Name(), k, "", l.ApplyByResult[k], j == 0))
		}

		ct := &c.Contention
		row := contentionRowView{Cell: c.Name(), Samples: results.Thousands(int64(ct.Samples)), Share: results.FormatShare(ct.LockWaitShare),
			BlockedMax: fmt.Sprint(ct.BlockedMax), Deadlocks: results.Thousands(ct.Deadlocks), Rollbacks: results.Thousands(ct.Rollbacks), Commits: results.Thousands(ct.Commits)}
		for _, k := range topWaits(ct.LockWaitSamples) {
			row.Waits = append(row.Waits, kv{k, results.Thousands(ct.LockWaitSamples[k])})
		}
		v.Contention = append(v.Contention, row)
		for j, s := range ct.TopStatements {
			if j == 5 {
				break
			}
			v.Statements = append(v.Statements, statementView{Cell: c.Name(), Calls: results.Thousands(s.Calls), Mean: formatMs(s.MeanMs),
				Total: formatMs(s.TotalMs), Query: compactSQL(s.Query)})
		}

		for _, a := range sortedKeys(c.Invariants.Anomalies) {
			n := c.Invariants.Anomalies[a]
			if n == 0 {
				continue
			}
			ex := c.Invariants.Examples[a]
			av := anomalyView{Cell: c.Name(), Strategy: c.StrategyLabel(), Name: a, Count: results.Thousands(n), Verdict: cellVerdict(c)}
			if len(ex) > 5 {
				av.More = len(ex) - 5
				ex = ex[:5]
			}
			av.Examples = ex
			v.Anomalies = append(v.Anomalies, av)
		}
		if c.Error != "" {
			v.Errors = append(v.Errors, kv{c.Name(), c.Error})
		}
	}
	v.Counters.Header = []string{"cell"}
	for _, col := range counterColumns {
		v.Counters.Header = append(v.Counters.Header, col.Name)
	}
	for i := range run.Cells {
		c := &run.Cells[i]
		row := []string{c.Name()}
		for _, col := range counterColumns {
			row = append(row, results.Thousands(col.Get(&c.Counters)))
		}
		v.Counters.Rows = append(v.Counters.Rows, row)
	}
	v.Workload, err = results.FlattenJSON(run.Workload)
	return err
}

func latencyRow(cell, kind, meaning string, s results.Summary, first bool) latencyRowView {
	r := summaryRow(s)
	return latencyRowView{Cell: cell, Kind: kind, Meaning: meaning, Count: r[0], P50: r[1], P90: r[2], P99: r[3], P999: r[4], Max: r[5], First: first}
}

func newConformView(c *results.Conformance) *conformView {
	s := c.Summary
	cv := &conformView{OK: s.Verdict == results.VerdictPass, Mutation: mutationText(s),
		Summary: fmt.Sprintf("Conformance %s: %d of %d rows as expected; %s", s.Verdict, s.AsExpected, s.Rows, mutationText(s))}
	mx := newConformMatrix(c.Rows)
	for _, col := range mx.Columns {
		cv.Columns = append(cv.Columns, col.key())
		cv.Broken = append(cv.Broken, col.Broken)
	}
	for _, sc := range mx.Scenarios {
		row := conformRowView{Scenario: sc}
		for _, col := range mx.Columns {
			r := mx.Cell[[2]string{sc, col.key()}]
			row.Cells = append(row.Cells, verdictView{Text: conformOutcome(r), Class: conformClass(r)})
		}
		cv.Rows = append(cv.Rows, row)
	}
	for _, r := range c.Rows {
		d := conformDetailView{Scenario: r.Scenario, Broker: r.Broker, Strategy: r.Strategy, Expected: expectedText(r), Got: string(r.Verdict),
			Anomalies: anomalyList(r.Anomalies), Time: formatSeconds(r.DurationS), Class: conformClass(&r)}
		if r.Error != "" {
			d.Got, d.Anomalies = string(results.VerdictError), r.Error
		}
		if d.Anomalies == "" {
			d.Anomalies = "none"
		}
		for _, a := range sortedKeys(r.Examples) {
			d.Examples = append(d.Examples, r.Examples[a]...)
		}
		if len(d.Examples) > 3 {
			d.Examples = d.Examples[:3]
		}
		cv.Details = append(cv.Details, d)
	}
	return cv
}

func conformClass(r *results.ConformRow) string {
	switch {
	case r == nil:
		return "unchecked"
	case r.Error != "":
		return "error"
	case r.AsExpected() && r.Verdict == results.VerdictFail:
		return "caught"
	case r.AsExpected() && r.Broken:
		return "unchecked"
	case r.AsExpected():
		return "pass"
	case r.Broken:
		return "missed"
	default:
		return "fail"
	}
}

// Used by the template to join wait events compactly.
func (r contentionRowView) WaitText() string {
	if len(r.Waits) == 0 {
		return "none"
	}
	parts := make([]string, len(r.Waits))
	for i, w := range r.Waits {
		parts[i] = w.Key + " " + w.Value
	}
	return strings.Join(parts, ", ")
}
