package render

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/internal/testenv/golden"
	"github.com/inboxbench/inboxbench/results"
)

// A calibration at rates (a real `bench calibrate --rate 4000 --rounds 3`,
// testdata/calibrate-rate) renders its latency table, vendor and driver
// per broker with intervals and the vendor's missing figures explained.
func TestRateCalibrationReport(t *testing.T) {
	r := loadFixture(t, filepath.Join(testdata, "calibrate-rate"))
	if r.Calibration == nil || !r.Calibration.HasRates() || r.Calibration.HasThroughput() {
		t.Fatal("calibrate-rate fixture should hold a calibration at rates alone")
	}
	md := render(t, Markdown, r)
	golden.Check(t, filepath.Join(testdata, "report.calibrate-rate.golden.md"), md)
	page := string(render(t, HTML, r))
	for _, want := range []string{"Latency at a rate", "e2e p99", "EndToEndLatency", "no rate option", "range of 3 rounds"} {
		if !strings.Contains(page, want) || !strings.Contains(string(md), want) {
			t.Errorf("rate calibration report lacks %q (md or html)", want)
		}
	}
}

// bench report of a run whose results directory holds a calibration at
// rates shows it beside the latencies of the run's fixed-rate cells.
func TestCalibrationBesideFixedRateCells(t *testing.T) {
	root := t.TempDir()
	fixtureVariant(t, root, "run-at-4000", t0, func(m map[string]any) {
		m["workload"].(map[string]any)["publish_rate"] = 4000
		for _, c := range m["cells"].([]any) {
			c.(map[string]any)["mode"] = string(results.ModeFixedRate)
		}
	})
	fixtureVariant(t, root, "run-saturated", t0, nil)
	writeFile(t, filepath.Join(root, "calibrate-rate", results.CalibrationFile), mustReadFile(t, filepath.Join(testdata, "calibrate-rate", results.CalibrationFile)))
	r := loadFixture(t, filepath.Join(root, "run-at-4000"))
	if r.RateCalibration == nil || filepath.Base(r.RateCalibrationDir) != "calibrate-rate" {
		t.Fatalf("the calibration at rates of the results directory was not found: %v %q", r.RateCalibration, r.RateCalibrationDir)
	}
	md := string(render(t, Markdown, r))
	page := string(render(t, HTML, r))
	for _, doc := range []string{md, page} {
		if !strings.Contains(doc, "Against the client calibration at this rate") || !strings.Contains(doc, "driver alone: e2e p99") {
			t.Fatal("the report has no calibration beside the cells' latencies")
		}
	}
	rows := CalibratedLatencyRows(r.Run, r.RateCalibration)
	// Every broker cell of the fixture (kafka and rabbitmq, tx and the
	// negative control) at 4,000/s, against the calibration at 4,000.
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %v", len(rows), rows)
	}
	for _, row := range rows {
		if row[1] != "4,000" || row[6] != "4,000" || row[10] == "-" {
			t.Errorf("row %v", row)
		}
	}
	if !strings.Contains(md, "| kafka/tx | 4,000 |") {
		t.Error("report.md lacks the kafka/tx row")
	}
	// A saturated run's cells have no rate to calibrate against.
	sat := loadFixture(t, filepath.Join(root, "run-saturated"))
	if rows := CalibratedLatencyRows(sat.Run, sat.RateCalibration); rows != nil {
		t.Errorf("saturated cells got calibration rows: %v", rows)
	}
}

// A calibration of three rounds (a real `bench calibrate --rounds 3`,
// testdata/calibrate-rounds) renders every ratio with its interval, the
// level of the brackets, and RocketMQ's single-send row under its
// BatchProducer row.
func TestCalibrationRoundsReport(t *testing.T) {
	r := loadFixture(t, filepath.Join(testdata, "calibrate-rounds"))
	md := render(t, Markdown, r)
	golden.Check(t, filepath.Join(testdata, "report.calibrate-rounds.golden.md"), md)
	page := string(render(t, HTML, r))
	for _, want := range []string{"range of 3 rounds (75% interval of the median)", "rocketmq (single sends)", "benchmark.BatchProducer", "vendor single-send publish command"} {
		if !strings.Contains(page, want) || !strings.Contains(string(md), want) {
			t.Errorf("calibration report lacks %q (md or html)", want)
		}
	}
	rows := CalibrationRows(r.Calibration)
	if len(rows) != 4 || rows[3][0] != "rocketmq (single sends)" || !strings.Contains(rows[0][4], " [") {
		t.Errorf("rows %v", rows)
	}
}
