package results

// RateCalibration is one broker at one rate (`bench calibrate --rate`):
// the vendor's tool and the driver each publishing at the same rate and
// shape with a consumer running, and their latencies over the rounds.
type RateCalibration struct {
	Rate   float64  `json:"rate"` // messages per second asked of both sides
	Vendor RateSide `json:"vendor"`
	Driver RateSide `json:"driver"`
	// Notes say what each comparison rests on: which end-to-end figure is
	// the reference when the vendor has no tool for it at a rate.
	Notes []string `json:"notes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// RateSide is one side at a rate: each round's figures and their medians
// with intervals. A figure the side cannot measure has no estimate, and
// Absent says why.
type RateSide struct {
	Tool    string   `json:"tool"`
	Command []string `json:"command,omitempty"` // the vendor's command line, first round
	// Method says where the figures come from.
	Method string `json:"method,omitempty"`
	// Absent says which figures the side has not and why (a tool without
	// a rate option, or without an end-to-end latency).
	Absent string        `json:"absent,omitempty"`
	Rounds []RateFigures `json:"rounds,omitempty"`
	// Medians over the rounds that have the figure, with intervals.
	Achieved   *Estimate `json:"achieved_msgs_per_s,omitempty"`
	PublishP50 *Estimate `json:"publish_p50_us,omitempty"`
	PublishP99 *Estimate `json:"publish_p99_us,omitempty"`
	E2EP50     *Estimate `json:"e2e_p50_us,omitempty"`
	E2EP99     *Estimate `json:"e2e_p99_us,omitempty"`
	LagP99     *Estimate `json:"lag_p99_us,omitempty"`
}

// RateFigures are one round of one side at a rate. Latencies in µs, 0
// when the side does not measure them: publish is send → confirm (ack),
// e2e publish → consumer, lag the publisher's own delay from a message's
// due time to its send.
type RateFigures struct {
	First      bool    `json:"first"` // this side ran first in its round
	Achieved   float64 `json:"achieved_msgs_per_s"`
	Messages   int64   `json:"messages"`
	PublishP50 int64   `json:"publish_p50_us,omitempty"`
	PublishP99 int64   `json:"publish_p99_us,omitempty"`
	E2EP50     int64   `json:"e2e_p50_us,omitempty"`
	E2EP99     int64   `json:"e2e_p99_us,omitempty"`
	LagP99     int64   `json:"lag_p99_us,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// Summarize fills the side's estimates from its rounds (a figure no
// round measured stays nil).
func (s *RateSide) Summarize() {
	est := func(get func(f *RateFigures) float64) *Estimate {
		var v []float64
		for i := range s.Rounds {
			if x := get(&s.Rounds[i]); x > 0 {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return nil
		}
		e := EstimateOf(v)
		return &e
	}
	s.Achieved = est(func(f *RateFigures) float64 { return f.Achieved })
	s.PublishP50 = est(func(f *RateFigures) float64 { return float64(f.PublishP50) })
	s.PublishP99 = est(func(f *RateFigures) float64 { return float64(f.PublishP99) })
	s.E2EP50 = est(func(f *RateFigures) float64 { return float64(f.E2EP50) })
	s.E2EP99 = est(func(f *RateFigures) float64 { return float64(f.E2EP99) })
	s.LagP99 = est(func(f *RateFigures) float64 { return float64(f.LagP99) })
}

// LatencyText is a latency estimate in µs as IntervalText writes it
// ("1.4ms [1.1ms–2.0ms]"), "-" when not measured.
func LatencyText(e *Estimate) string {
	if e == nil || e.N == 0 {
		return "-"
	}
	return IntervalText(*e, FormatMicrosFloat)
}

// RateEstimateText is an achieved-rate estimate ("3,998 [3,990–4,001]"), "-"
// when not measured.
func RateEstimateText(e *Estimate) string {
	if e == nil || e.N == 0 {
		return "-"
	}
	return IntervalText(*e, FormatRate)
}

// NearestRate returns the row's calibration at the rate nearest to rate, nil
// without one.
func (b *BrokerCalibration) NearestRate(rate float64) *RateCalibration {
	var best *RateCalibration
	for i := range b.AtRate {
		r := &b.AtRate[i]
		if best == nil || abs(r.Rate-rate) < abs(best.Rate-rate) {
			best = r
		}
	}
	return best
}
