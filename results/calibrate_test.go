package results

import (
	"path/filepath"
	"testing"
	"time"
)

// Rounds combine into medians of rates and of ratios, each ratio taken
// within its round, with the medians' intervals; a round with no figure
// does not pull the median down.
func TestCombineRoundsTakesMedians(t *testing.T) {
	round := func(vp, dp, vc, dc, single float64) BrokerCalibration {
		b := BrokerCalibration{Broker: "rocketmq"}
		b.Vendor.Publish.MsgsPerS, b.Driver.Publish.MsgsPerS = vp, dp
		b.Vendor.Consume.MsgsPerS, b.Driver.Consume.MsgsPerS = vc, dc
		b.Vendor.Publish.Method = "m"
		b.Vendor.SinglePublish = &Measurement{MsgsPerS: single, Method: "s"}
		b.Ratios()
		return b
	}
	row := CombineRounds([]BrokerCalibration{round(100, 90, 200, 100, 10), round(200, 160, 300, 270, 40), round(150, 150, 0, 0, 30)})
	if len(row.Rounds) != 3 || !row.Rounds[0].VendorFirst || row.Rounds[1].VendorFirst {
		t.Fatalf("rounds %+v", row.Rounds)
	}
	if row.Vendor.Publish.MsgsPerS != 150 || row.Driver.Publish.MsgsPerS != 150 {
		t.Errorf("publish medians %v %v, want 150 150", row.Vendor.Publish.MsgsPerS, row.Driver.Publish.MsgsPerS)
	}
	if row.PublishRatio != 0.9 { // ratios 0.9, 0.8, 1.0
		t.Errorf("publish ratio %v, want the median 0.9", row.PublishRatio)
	}
	if row.ConsumeRatio != 0.7 { // 0.5 and 0.9; the third round has none
		t.Errorf("consume ratio %v, want 0.7", row.ConsumeRatio)
	}
	e := row.Estimates
	if e == nil || e.PublishRatio.N != 3 || e.PublishRatio.Lo != 0.8 || e.PublishRatio.Hi != 1.0 || e.PublishRatio.Confidence != 0.75 || e.ConsumeRatio.N != 2 {
		t.Fatalf("estimates %+v", e)
	}
	if got := row.RatioText(true); got != "0.90 [0.80–1.00]" {
		t.Errorf("ratio text %q", got)
	}
	if row.Vendor.Publish.Method != "m; median of 3 rounds" {
		t.Errorf("method %q", row.Vendor.Publish.Method)
	}
	// The second publish row: single sends 10, 40, 30 against the driver's 90, 160, 150.
	if row.Vendor.SinglePublish.MsgsPerS != 30 || row.SinglePublishRatio != 5 || e.SinglePublishRatio == nil || e.SinglePublishRatio.Lo != 4 || e.SinglePublishRatio.Hi != 9 {
		t.Errorf("single-send row %v, ratio %v, estimate %+v", row.Vendor.SinglePublish.MsgsPerS, row.SinglePublishRatio, e.SinglePublishRatio)
	}
	if got := row.SingleRatioText(); got != "5.00 [4.00–9.00]" {
		t.Errorf("single ratio text %q", got)
	}
	one := CombineRounds([]BrokerCalibration{round(100, 90, 200, 100, 0)})
	if one.Rounds != nil || one.RatioText(true) != "0.90" || one.Estimates == nil || one.Estimates.PublishRatio.N != 1 {
		t.Errorf("one round must come back as it is, with estimates of one value: %+v", one)
	}
}

func TestLevelText(t *testing.T) {
	for n, want := range map[int]string{
		1: "single round: no interval",
		3: "range of 3 rounds (75% interval of the median)",
		5: "range of 5 rounds (94% interval of the median)",
		8: "96% interval of the median over 8 rounds", // the level order statistics reach: at least 95%,
	} {
		if got := LevelText(n); got != want {
			t.Errorf("LevelText(%d) = %q, want %q", n, got, want)
		}
	}
}

// A side at a rate summarizes each figure over the rounds that measured
// it; a figure none measured has no estimate.
func TestRateSideSummarize(t *testing.T) {
	s := RateSide{Rounds: []RateFigures{
		{Achieved: 3990, PublishP50: 1000, PublishP99: 9000},
		{Achieved: 4001, PublishP50: 1200, PublishP99: 12000},
		{Achieved: 3998, PublishP50: 1100, PublishP99: 30000, Error: "late"},
	}}
	s.Summarize()
	if s.Achieved == nil || s.Achieved.Median != 3998 || s.PublishP99.Median != 12000 || s.PublishP99.Lo != 9000 || s.PublishP99.Hi != 30000 {
		t.Errorf("estimates %+v %+v", s.Achieved, s.PublishP99)
	}
	if s.E2EP50 != nil || s.LagP99 != nil {
		t.Errorf("figures no round measured have estimates: %+v %+v", s.E2EP50, s.LagP99)
	}
	if got := LatencyText(s.PublishP99); got != "12ms [9ms–30ms]" {
		t.Errorf("latency text %q", got)
	}
	if LatencyText(s.E2EP99) != "-" {
		t.Error("an absent latency is not a dash")
	}
	b := BrokerCalibration{AtRate: []RateCalibration{{Rate: 1000}, {Rate: 4000}}}
	if r := b.NearestRate(3000); r == nil || r.Rate != 4000 {
		t.Errorf("nearest rate to 3000: %+v", r)
	}
}

// A run cites the newest calibration with throughput, the report the
// newest at rates: a calibration at rates does not hide an older one of
// throughput from the runs' notes.
func TestLatestCalibrationByKind(t *testing.T) {
	root := t.TempDir()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	write := func(id string, at time.Time, b BrokerCalibration) {
		c := &Calibration{SchemaVersion: CalibrationSchemaVersion, RunID: id, StartedAt: at, FinishedAt: at, Brokers: []BrokerCalibration{b}}
		if _, err := c.Write(filepath.Join(root, id)); err != nil {
			t.Fatal(err)
		}
	}
	tp := BrokerCalibration{Broker: "kafka"}
	tp.Vendor.Publish.MsgsPerS, tp.Driver.Publish.MsgsPerS = 100, 90
	write("old-throughput", t0, tp)
	write("new-rate", t0.Add(time.Hour), BrokerCalibration{Broker: "kafka", AtRate: []RateCalibration{{Rate: 4000}}})
	if c, _ := LatestCalibration(root); c == nil || c.RunID != "old-throughput" {
		t.Errorf("LatestCalibration: %+v", c)
	}
	if c, dir := LatestRateCalibration(root); c == nil || c.RunID != "new-rate" || filepath.Base(dir) != "new-rate" {
		t.Errorf("LatestRateCalibration: %+v %s", c, dir)
	}
}
