package results

import "testing"

// Rounds combine into medians of rates and of ratios, each ratio taken
// within its round; a round with no figure does not pull the median down.
func TestCombineRoundsTakesMedians(t *testing.T) {
	round := func(vp, dp, vc, dc float64) BrokerCalibration {
		b := BrokerCalibration{Broker: "kafka"}
		b.Vendor.Publish.MsgsPerS, b.Driver.Publish.MsgsPerS = vp, dp
		b.Vendor.Consume.MsgsPerS, b.Driver.Consume.MsgsPerS = vc, dc
		b.Vendor.Publish.Method = "m"
		b.Ratios()
		return b
	}
	row := CombineRounds([]BrokerCalibration{round(100, 90, 200, 100), round(200, 160, 300, 270), round(150, 150, 0, 0)})
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
	if got := row.RatioText(true); got != "0.90 [0.80–1.00]" {
		t.Errorf("ratio text %q", got)
	}
	if row.Vendor.Publish.Method != "m; median of 3 rounds" {
		t.Errorf("method %q", row.Vendor.Publish.Method)
	}
	if one := CombineRounds([]BrokerCalibration{round(100, 90, 200, 100)}); one.Rounds != nil || one.RatioText(true) != "0.90" {
		t.Errorf("one round must come back as it is: %+v", one)
	}
}
