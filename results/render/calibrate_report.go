package render

import (
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/results"
)

// The "client calibration" section of report.md and report.html: one row
// per broker with the vendor tool's and the Go driver's rates on the same
// shape, then how each figure was obtained (the vendor command lines).

// calibrationHeader is the table header shared by both writers.
var calibrationHeader = []string{"broker", "server", "vendor publish/s", "driver publish/s", "publish ratio",
	"vendor consume/s", "driver consume/s", "consume ratio"}

// calibrationRows formats the table rows.
func calibrationRows(c *results.Calibration) [][]string {
	var rows [][]string
	for _, b := range c.Brokers {
		rows = append(rows, []string{b.Broker, orDash(b.Server),
			rateOrDash(b.Vendor.Publish.MsgsPerS), rateOrDash(b.Driver.Publish.MsgsPerS), b.RatioText(true),
			rateOrDash(b.Vendor.Consume.MsgsPerS), rateOrDash(b.Driver.Consume.MsgsPerS), b.RatioText(false)})
	}
	return rows
}

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
	rounds := ""
	if s.Rounds > 1 {
		rounds = fmt.Sprintf(" Medians of %d rounds, alternating which side went first; in brackets the range of the rounds' ratios.", s.Rounds)
	}
	return fmt.Sprintf("%d-byte messages, %d shards, %d producers, %d consumers, batch/confirm window %d, prefetch %d%s, %s of publishing per side with the first %s left out; %s.",
		s.MessageSize, s.Shards, s.Producers, s.Consumers, s.Batch, s.Prefetch, mb,
		formatSeconds(s.DurationS), formatSeconds(s.WarmupS), s.Confirms) + rounds
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
		add("vendor publish command", strings.Join(b.Vendor.Publish.Command, " "))
		add("vendor publish figure", b.Vendor.Publish.Method)
		add("vendor publish error", b.Vendor.Publish.Error)
		add("vendor consume command", strings.Join(b.Vendor.Consume.Command, " "))
		add("vendor consume figure", b.Vendor.Consume.Method)
		add("vendor consume error", b.Vendor.Consume.Error)
		add("driver publish figure", b.Driver.Publish.Method)
		add("driver publish error", b.Driver.Publish.Error)
		add("driver consume figure", b.Driver.Consume.Method)
		add("driver consume error", b.Driver.Consume.Error)
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
	m.p("Each broker's own perf tool, then the Go driver, one right after the other on the same machine and the same shape: %s A ratio is driver/vendor msgs/s: near 1, the driver reaches what the broker gives its vendor's client; well below, the client is the bottleneck, not the broker. Calibration `%s` on %d cores.\n\n",
		shapeText(c.Shape), c.RunID, c.Cores)
	m.table(calibrationHeader, "llrrrrrr", calibrationRows(c))
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
	Intro   string
	Header  []string
	Rows    [][]string
	Details []calibrationDetail
}

func newCalibrationView(c *results.Calibration) *calibrationView {
	return &calibrationView{
		Intro: fmt.Sprintf("Each broker's own perf tool, then the Go driver, one right after the other on the same machine and the same shape: %s A ratio is driver/vendor msgs/s: near 1, the driver reaches what the broker gives its vendor's client. Calibration %s on %d cores.",
			shapeText(c.Shape), c.RunID, c.Cores),
		Header: calibrationHeader, Rows: calibrationRows(c), Details: calibrationDetails(c),
	}
}
