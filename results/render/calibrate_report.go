package render

import (
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/results"
)

// The "client calibration" section of report.md and report.html: one row
// per broker with the vendor tool's and the Go driver's rates on the same
// shape and the ratios with their intervals, the latency table of a
// calibration at rates, then how each figure was obtained (the vendor
// command lines).

// CalibrationHeader is the throughput table's header, shared by the
// writers and `bench calibrate`.
var CalibrationHeader = []string{"broker", "server", "vendor publish/s", "driver publish/s", "publish ratio",
	"vendor consume/s", "driver consume/s", "consume ratio"}

// CalibrationRows formats the throughput table: a row per broker that
// measured throughput, and a second publish row under a broker whose
// vendor has one (RocketMQ's single-send Producer).
func CalibrationRows(c *results.Calibration) [][]string {
	var rows [][]string
	for _, b := range c.Brokers {
		if !b.HasThroughput() {
			continue
		}
		rows = append(rows, []string{b.Broker, orDash(b.Server),
			rateOrDash(b.Vendor.Publish.MsgsPerS), rateOrDash(b.Driver.Publish.MsgsPerS), b.RatioText(true),
			rateOrDash(b.Vendor.Consume.MsgsPerS), rateOrDash(b.Driver.Consume.MsgsPerS), b.RatioText(false)})
		if sp := b.Vendor.SinglePublish; sp != nil {
			rows = append(rows, []string{b.Broker + " (single sends)", "", rateOrDash(sp.MsgsPerS),
				rateOrDash(b.Driver.Publish.MsgsPerS), b.SingleRatioText(), "", "", ""})
		}
	}
	return rows
}

// calibrationRounds is the most rounds any broker's ratios rest on.
func calibrationRounds(c *results.Calibration) int {
	n := 0
	for _, b := range c.Brokers {
		if e := b.Estimates; e != nil {
			n = max(n, e.PublishRatio.N, e.ConsumeRatio.N)
		}
		for _, r := range b.AtRate {
			for _, s := range []*results.RateSide{&r.Vendor, &r.Driver} {
				n = max(n, len(s.Rounds))
			}
		}
	}
	return n
}

// CalibrationRoundsNote says how the brackets are to be read.
func CalibrationRoundsNote(c *results.Calibration) string {
	n := max(calibrationRounds(c), c.Shape.Rounds)
	if n < 2 {
		return "A single round: no interval (run --rounds 3 or more for one)."
	}
	return fmt.Sprintf("Medians of %d rounds, alternating which side went first; in brackets the %s.", n, results.LevelText(n))
}

// CalibrationRateHeader is the latency table's header.
var CalibrationRateHeader = []string{"broker", "rate", "side", "achieved/s", "publish p50", "publish p99", "e2e p50", "e2e p99", "lag p99"}

// CalibrationRateRows formats the latency table of a calibration at rates: for each
// broker and rate a vendor row and a driver row, each figure the median
// over the rounds with its interval, "-" where the side has none.
func CalibrationRateRows(c *results.Calibration) [][]string {
	var rows [][]string
	for _, b := range c.Brokers {
		for _, rc := range b.AtRate {
			for _, s := range []struct {
				name string
				side *results.RateSide
			}{{"vendor", &rc.Vendor}, {"driver", &rc.Driver}} {
				if s.name == "vendor" && len(s.side.Rounds) == 0 {
					rows = append(rows, []string{b.Broker, results.FormatRate(rc.Rate), "vendor", "-", "-", "-", "-", "-", "-"})
					continue
				}
				rows = append(rows, []string{b.Broker, results.FormatRate(rc.Rate), s.name, results.RateEstimateText(s.side.Achieved),
					results.LatencyText(s.side.PublishP50), results.LatencyText(s.side.PublishP99),
					results.LatencyText(s.side.E2EP50), results.LatencyText(s.side.E2EP99), results.LatencyText(s.side.LagP99)})
			}
		}
	}
	return rows
}

// CalibrationRateNotes are what the latency table's rows rest on, per broker: which
// figures a vendor has not and why, and which end-to-end figure is the
// reference.
func CalibrationRateNotes(c *results.Calibration) []string {
	var out []string
	for _, b := range c.Brokers {
		if len(b.AtRate) == 0 {
			continue
		}
		rc := b.AtRate[0]
		if rc.Vendor.Absent != "" {
			out = append(out, b.Broker+" vendor: "+rc.Vendor.Absent)
		}
		for _, n := range rc.Notes {
			out = append(out, b.Broker+": "+n)
		}
		for _, r := range b.AtRate {
			if r.Error != "" {
				out = append(out, fmt.Sprintf("%s at %s msgs/s: %s", b.Broker, results.FormatRate(r.Rate), r.Error))
			}
		}
	}
	return out
}

// CalibrationRateIntro describes the latency table.
const CalibrationRateIntro = "Each side publishes at the rate and on the shape for the duration into a fresh topic, a consumer reading live; publish is send → confirm (ack), e2e publish → consumer, lag the driver's delay from a message's due time to its send. Both sides over the whole run, as the vendor tools summarize it (the driver's consumer received a probe message first, PerfTest's figures start once all its clients run)."

func rateOrDash(v float64) string {
	if v <= 0 {
		return "-"
	}
	return results.FormatRate(v)
}

// shapeText is the shape in one sentence.
func shapeText(s results.Shape) string {
	mb := ""
	if s.MaxBatch > 1 {
		mb = fmt.Sprintf(", driver handler batches of %d", s.MaxBatch)
	}
	if len(s.Rates) > 0 {
		rates := make([]string, len(s.Rates))
		for i, r := range s.Rates {
			rates[i] = results.FormatRate(r)
		}
		return fmt.Sprintf("%d-byte messages, %d shards, %d producers, %d consumers, confirm window %d, prefetch %d%s, at %s msgs/s for %s per side; %s.",
			s.MessageSize, s.Shards, s.Producers, s.Consumers, s.Batch, s.Prefetch, mb, strings.Join(rates, ", "), formatSeconds(s.DurationS), s.Confirms)
	}
	return fmt.Sprintf("%d-byte messages, %d shards, %d producers, %d consumers, batch/confirm window %d, prefetch %d%s, %s of publishing per side with the first %s left out; %s.",
		s.MessageSize, s.Shards, s.Producers, s.Consumers, s.Batch, s.Prefetch, mb,
		formatSeconds(s.DurationS), formatSeconds(s.WarmupS), s.Confirms)
}

// calibrationDetail is what each broker's figures rest on.
type calibrationDetail struct {
	Broker, VendorTool, DriverTool string
	Lines                          []calibLine
}

// calibLine is one label → text line: a command, a method, a note, an error.
type calibLine struct {
	Key, Value string
	Code       bool // a command line, shown as code
}

func calibrationDetails(c *results.Calibration) []calibrationDetail {
	var out []calibrationDetail
	for _, b := range c.Brokers {
		d := calibrationDetail{Broker: b.Broker, VendorTool: b.Vendor.Tool, DriverTool: b.Driver.Tool}
		add := func(k, v string) {
			if v != "" {
				d.Lines = append(d.Lines, calibLine{Key: k, Value: v, Code: strings.HasSuffix(k, "command")})
			}
		}
		if b.HasThroughput() {
			add("vendor publish command", strings.Join(b.Vendor.Publish.Command, " "))
			add("vendor publish figure", b.Vendor.Publish.Method)
			add("vendor publish error", b.Vendor.Publish.Error)
			add("vendor consume command", strings.Join(b.Vendor.Consume.Command, " "))
			add("vendor consume figure", b.Vendor.Consume.Method)
			add("vendor consume error", b.Vendor.Consume.Error)
			if sp := b.Vendor.SinglePublish; sp != nil {
				add("vendor single-send publish command", strings.Join(sp.Command, " "))
				add("vendor single-send publish figure", sp.Method)
				add("vendor single-send publish error", sp.Error)
			}
			add("driver publish figure", b.Driver.Publish.Method)
			add("driver publish error", b.Driver.Publish.Error)
			add("driver consume figure", b.Driver.Consume.Method)
			add("driver consume error", b.Driver.Consume.Error)
		}
		if len(b.AtRate) > 0 {
			rc := b.AtRate[0]
			if d.VendorTool == "" {
				d.VendorTool, d.DriverTool = rc.Vendor.Tool, rc.Driver.Tool
			}
			add("vendor at a rate command", strings.Join(rc.Vendor.Command, " "))
			add("vendor at a rate figures", rc.Vendor.Method)
			add("vendor at a rate absent", rc.Vendor.Absent)
			add("driver at a rate figures", rc.Driver.Method)
		}
		for _, n := range b.Notes {
			add("shape difference", n)
		}
		add("error", b.Error)
		out = append(out, d)
	}
	return out
}

func (m *mdWriter) calibration(c *results.Calibration) {
	m.p("## Client calibration\n\n")
	if c.HasThroughput() {
		m.p("Each broker's own perf tool, then the Go driver, one right after the other on the same machine and the same shape: %s A ratio is driver/vendor msgs/s: near 1, the driver reaches what the broker gives its vendor's client; well below, the client is the bottleneck, not the broker. %s Calibration `%s` on %d cores.\n\n",
			shapeText(c.Shape), CalibrationRoundsNote(c), c.RunID, c.Cores)
		m.table(CalibrationHeader, "llrrrrrr", CalibrationRows(c))
	}
	if c.HasRates() {
		if !c.HasThroughput() {
			m.p("Each broker's own perf tool and the Go driver on the same machine and the same shape: %s Calibration `%s` on %d cores.\n\n", shapeText(c.Shape), c.RunID, c.Cores)
		}
		m.p("### Latency at a rate\n\n%s %s\n\n", CalibrationRateIntro, CalibrationRoundsNote(c))
		m.table(CalibrationRateHeader, "lrlrrrrrr", CalibrationRateRows(c))
		for _, n := range CalibrationRateNotes(c) {
			m.p("- %s\n", n)
		}
		m.p("\n")
	}
	for _, d := range calibrationDetails(c) {
		m.p("### %s\n\n", d.Broker)
		m.p("Vendor: %s. Driver: %s.\n\n", d.VendorTool, d.DriverTool)
		var rows [][]string
		for _, l := range d.Lines {
			v := l.Value
			if l.Code {
				v = "`" + strings.ReplaceAll(v, "`", "'") + "`"
			}
			rows = append(rows, []string{l.Key, v})
		}
		m.table([]string{"", "value"}, "ll", rows)
	}
}

// calibrationView is the HTML section.
type calibrationView struct {
	Intro                string
	Header               []string
	Rows                 [][]string
	RateIntro            string
	RateHeader           []string
	RateRows             [][]string
	RateNotes            []string
	Details              []calibrationDetail
	HasThroughput, Rates bool
}

func newCalibrationView(c *results.Calibration) *calibrationView {
	v := &calibrationView{
		Intro: fmt.Sprintf("Each broker's own perf tool, then the Go driver, one right after the other on the same machine and the same shape: %s A ratio is driver/vendor msgs/s: near 1, the driver reaches what the broker gives its vendor's client. %s Calibration %s on %d cores.",
			shapeText(c.Shape), CalibrationRoundsNote(c), c.RunID, c.Cores),
		Details: calibrationDetails(c), HasThroughput: c.HasThroughput(), Rates: c.HasRates(),
	}
	if v.HasThroughput {
		v.Header, v.Rows = CalibrationHeader, CalibrationRows(c)
	} else {
		v.Intro = fmt.Sprintf("Each broker's own perf tool and the Go driver on the same machine and the same shape: %s Calibration %s on %d cores.", shapeText(c.Shape), c.RunID, c.Cores)
	}
	if v.Rates {
		v.RateIntro = CalibrationRateIntro + " " + CalibrationRoundsNote(c)
		v.RateHeader, v.RateRows, v.RateNotes = CalibrationRateHeader, CalibrationRateRows(c), CalibrationRateNotes(c)
	}
	return v
}

// The latency of a run's fixed-rate cells beside a calibration at rates
// (Report.RateCalibration): what the broker's own tool and the driver
// alone (no database) measured at that rate.

// CalibratedLatencyHeader is the table's header.
var CalibratedLatencyHeader = []string{"cell", "rate", "e2e p50", "e2e p99", "publish p99", "publish lag p99",
	"calibrated at", "vendor publish p99", "vendor e2e p99", "driver alone: publish p99", "driver alone: e2e p99"}

// CalibratedLatencyRows are the fixed-rate broker cells of run, each with
// the calibration's figures of its broker at the calibrated rate nearest
// to the cell's; nil when no cell has one.
func CalibratedLatencyRows(run *results.Run, cal *results.Calibration) [][]string {
	rate := run.PublishRate()
	if cal == nil || rate <= 0 {
		return nil
	}
	var rows [][]string
	for i := range run.Cells {
		c := &run.Cells[i]
		if c.Baseline || c.Mode != results.ModeFixedRate {
			continue
		}
		b := cal.Broker(c.Broker)
		if b == nil {
			continue
		}
		rc := b.NearestRate(rate)
		if rc == nil {
			continue
		}
		l := &c.Latency
		rows = append(rows, []string{c.Name(), results.FormatRate(rate), latencyCell(l.E2E, l.E2E.P50), latencyCell(l.E2E, l.E2E.P99),
			latencyCell(l.Publish, l.Publish.P99), latencyCell(l.PublishLag, l.PublishLag.P99), results.FormatRate(rc.Rate),
			results.LatencyText(rc.Vendor.PublishP99), results.LatencyText(rc.Vendor.E2EP99),
			results.LatencyText(rc.Driver.PublishP99), results.LatencyText(rc.Driver.E2EP99)})
	}
	return rows
}

// calibratedLatencyNote names the calibration and what its columns rest on.
func calibratedLatencyNote(cal *results.Calibration, dir string) string {
	return fmt.Sprintf("The client calibration at rates %s (%s, %s; bench calibrate --rate) measured each broker's own tool and the driver alone, without the database, at the rate nearest to the cells': the cell's latency above the driver alone's is the inbox's and the harness's, the driver alone's above the vendor's the client's. %s",
		cal.RunID, dir, cal.StartedAt.UTC().Format("2006-01-02 15:04 UTC"), CalibrationRoundsNote(cal))
}

func (m *mdWriter) calibratedLatency(run *results.Run) {
	rows := CalibratedLatencyRows(run, m.rateCal)
	if len(rows) == 0 {
		return
	}
	m.p("### Against the client calibration at this rate\n\n%s\n\n", calibratedLatencyNote(m.rateCal, m.rateCalDir))
	m.table(CalibratedLatencyHeader, "lrrrrrrrrrr", rows)
	for _, n := range CalibrationRateNotes(m.rateCal) {
		m.p("- %s\n", n)
	}
	m.p("\n")
}

// calibratedLatencyView is the HTML subsection.
type calibratedLatencyView struct {
	Note   string
	Header []string
	Rows   [][]string
	Notes  []string
}

func newCalibratedLatencyView(run *results.Run, cal *results.Calibration, dir string) *calibratedLatencyView {
	rows := CalibratedLatencyRows(run, cal)
	if len(rows) == 0 {
		return nil
	}
	return &calibratedLatencyView{Note: calibratedLatencyNote(cal, dir), Header: CalibratedLatencyHeader, Rows: rows, Notes: CalibrationRateNotes(cal)}
}
