package results

import (
	"fmt"
	"path/filepath"
	"sort"
	"time"
)

// CalibrationFile is the file `bench calibrate` writes into its run
// directory.
const CalibrationFile = "calibrate.json"

// CalibrationSchemaVersion is bumped on any incompatible change of
// calibrate.json.
const CalibrationSchemaVersion = 1

// Calibration is one calibrate.json: for each broker, the vendor's own
// perf tool and the Go driver measured one after the other on the same
// shape, so a reader can tell a slow client from a slow broker.
type Calibration struct {
	SchemaVersion int       `json:"schema_version"`
	RunID         string    `json:"run_id"`
	StartedAt     time.Time `json:"started_at"`
	FinishedAt    time.Time `json:"finished_at"`
	Shape         Shape     `json:"shape"`
	// Host facts: figures from different machines are not comparable.
	Cores     int                 `json:"cores"`
	GoVersion string              `json:"go"`
	Java      string              `json:"java,omitempty"`
	GitCommit string              `json:"git_commit,omitempty"`
	Brokers   []BrokerCalibration `json:"brokers"`
}

// Shape is what both sides of a calibration ran.
type Shape struct {
	MessageSize int `json:"message_size"`
	Shards      int `json:"shards"`
	Producers   int `json:"producers"`
	Consumers   int `json:"consumers"`
	Batch       int `json:"batch"` // driver messages per Publish call; PerfTest confirm window
	Prefetch    int `json:"prefetch"`
	// MaxBatch is the driver's handler batch (1: one delivery per call and
	// one ack each, like the vendor consumers).
	MaxBatch  int     `json:"max_batch"`
	DurationS float64 `json:"duration_s"` // publish time of each side
	WarmupS   float64 `json:"warmup_s"`   // left out of the publish figures
	// Rounds is how many times both sides were measured, alternating
	// which went first (absent: once).
	Rounds int `json:"rounds,omitempty"`
	// Rates are the rates of a latency calibration (`bench calibrate
	// --rate`), in messages per second; absent for throughput.
	Rates []float64 `json:"rates,omitempty"`
	// Confirms says what a publish waits for: acks=all, publisher
	// confirms, a synchronous send.
	Confirms string `json:"confirms"`
}

// BrokerCalibration is one broker's row.
type BrokerCalibration struct {
	Broker string     `json:"broker"`
	Server string     `json:"server,omitempty"` // the server's version as the stack reports it
	Vendor SideResult `json:"vendor"`
	Driver SideResult `json:"driver"`
	// PublishRatio and ConsumeRatio are driver/vendor msgs/s; 0 when either
	// side has no figure. With several rounds, the medians of the rounds'
	// ratios (each measured side by side).
	PublishRatio float64 `json:"publish_ratio"`
	ConsumeRatio float64 `json:"consume_ratio"`
	// SinglePublishRatio is the driver's publish rate over the vendor's
	// second publish row (Vendor.SinglePublish), 0 without one.
	SinglePublishRatio float64 `json:"single_publish_ratio,omitempty"`
	// Estimates are every rate and ratio as the median over the rounds
	// with its confidence interval (one round: the value alone).
	Estimates *CalibrationEstimates `json:"estimates,omitempty"`
	// Rounds are each round's rates and ratios when there were several;
	// then the sides' msgs/s are the medians of the rounds'.
	Rounds []CalibrationRound `json:"rounds,omitempty"`
	// AtRate is the latency calibration (`bench calibrate --rate`): both
	// sides at each rate asked for, with a consumer running.
	AtRate []RateCalibration `json:"at_rate,omitempty"`
	// Notes say where the two sides' shapes differ unavoidably.
	Notes []string `json:"notes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// SideResult is one side (vendor tool or Go driver) of a broker's row.
type SideResult struct {
	// Tool names the program: Maven coordinates and classes, or the Go
	// client module and version.
	Tool    string      `json:"tool"`
	Publish Measurement `json:"publish"`
	Consume Measurement `json:"consume"`
	// SinglePublish is a second publish figure of the vendor's where its
	// main one is not its only tool: RocketMQ's single-send benchmark
	// Producer beside its BatchProducer (the driver's publish is compared
	// with both).
	SinglePublish *Measurement `json:"single_publish,omitempty"`
}

// Measurement is one rate.
type Measurement struct {
	MsgsPerS float64 `json:"msgs_per_s"`
	Messages int64   `json:"messages"`
	// Tool names the program when it is not the side's main one (a
	// second publish row).
	Tool string `json:"tool,omitempty"`
	// Method says which lines or which span the figure comes from.
	Method string `json:"method,omitempty"`
	// Command is the exact vendor command line (empty for the driver).
	Command []string  `json:"command,omitempty"`
	Series  []float64 `json:"series,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// CalibrationRound is one round of a broker's calibration.
type CalibrationRound struct {
	VendorFirst   bool    `json:"vendor_first"`
	VendorPublish float64 `json:"vendor_publish_msgs_per_s"`
	DriverPublish float64 `json:"driver_publish_msgs_per_s"`
	VendorConsume float64 `json:"vendor_consume_msgs_per_s"`
	DriverConsume float64 `json:"driver_consume_msgs_per_s"`
	PublishRatio  float64 `json:"publish_ratio"`
	ConsumeRatio  float64 `json:"consume_ratio"`
	// VendorSinglePublish and SinglePublishRatio: the second publish row's
	// (absent without one).
	VendorSinglePublish float64 `json:"vendor_single_publish_msgs_per_s,omitempty"`
	SinglePublishRatio  float64 `json:"single_publish_ratio,omitempty"`
}

// CalibrationEstimates are a broker's rates and ratios over its rounds:
// medians with their confidence intervals (EstimateOf), from the rounds
// that have the figure.
type CalibrationEstimates struct {
	VendorPublish Estimate `json:"vendor_publish_msgs_per_s"`
	DriverPublish Estimate `json:"driver_publish_msgs_per_s"`
	VendorConsume Estimate `json:"vendor_consume_msgs_per_s"`
	DriverConsume Estimate `json:"driver_consume_msgs_per_s"`
	PublishRatio  Estimate `json:"publish_ratio"`
	ConsumeRatio  Estimate `json:"consume_ratio"`
	// The second publish row's, when the vendor has one.
	VendorSinglePublish *Estimate `json:"vendor_single_publish_msgs_per_s,omitempty"`
	SinglePublishRatio  *Estimate `json:"single_publish_ratio,omitempty"`
}

// VendorFirst says whether the vendor tool runs before the driver in
// round i (from 0): the order alternates, so that what the first side
// leaves behind (page cache, log segments, a warm JIT) does not always
// favour the same one.
func VendorFirst(round int) bool { return round%2 == 0 }

// CombineRounds makes one row of a broker's rounds (each with its ratios
// filled): the first round's sides (tools, commands, series), with the
// rates replaced by the medians over the rounds that have them, the
// ratios by the medians of the rounds' ratios, and Estimates their
// intervals. One round comes back as it is, with Estimates of one value.
func CombineRounds(rounds []BrokerCalibration) BrokerCalibration {
	if len(rounds) == 0 {
		return BrokerCalibration{}
	}
	row := rounds[0]
	row.Rounds = nil
	for i := range rounds {
		b := &rounds[i]
		r := CalibrationRound{VendorFirst: VendorFirst(i),
			VendorPublish: b.Vendor.Publish.MsgsPerS, DriverPublish: b.Driver.Publish.MsgsPerS,
			VendorConsume: b.Vendor.Consume.MsgsPerS, DriverConsume: b.Driver.Consume.MsgsPerS,
			PublishRatio: b.PublishRatio, ConsumeRatio: b.ConsumeRatio, SinglePublishRatio: b.SinglePublishRatio}
		if b.Vendor.SinglePublish != nil {
			r.VendorSinglePublish = b.Vendor.SinglePublish.MsgsPerS
		}
		row.Rounds = append(row.Rounds, r)
		if row.Error == "" {
			row.Error = b.Error
		}
	}
	est := func(get func(r *CalibrationRound) float64) Estimate {
		var v []float64
		for i := range row.Rounds {
			if x := get(&row.Rounds[i]); x > 0 {
				v = append(v, x)
			}
		}
		return EstimateOf(v)
	}
	e := &CalibrationEstimates{
		VendorPublish: est(func(r *CalibrationRound) float64 { return r.VendorPublish }),
		DriverPublish: est(func(r *CalibrationRound) float64 { return r.DriverPublish }),
		VendorConsume: est(func(r *CalibrationRound) float64 { return r.VendorConsume }),
		DriverConsume: est(func(r *CalibrationRound) float64 { return r.DriverConsume }),
		PublishRatio:  est(func(r *CalibrationRound) float64 { return r.PublishRatio }),
		ConsumeRatio:  est(func(r *CalibrationRound) float64 { return r.ConsumeRatio }),
	}
	if row.Vendor.SinglePublish != nil {
		sp, sr := est(func(r *CalibrationRound) float64 { return r.VendorSinglePublish }), est(func(r *CalibrationRound) float64 { return r.SinglePublishRatio })
		e.VendorSinglePublish, e.SinglePublishRatio = &sp, &sr
	}
	row.Estimates = e
	if len(rounds) == 1 {
		row.Rounds = nil
		return row
	}
	note := fmt.Sprintf("; median of %d rounds", len(rounds))
	for _, m := range []struct {
		dst *Measurement
		e   Estimate
	}{
		{&row.Vendor.Publish, e.VendorPublish}, {&row.Driver.Publish, e.DriverPublish},
		{&row.Vendor.Consume, e.VendorConsume}, {&row.Driver.Consume, e.DriverConsume},
	} {
		m.dst.MsgsPerS = m.e.Median
		m.dst.Method += note
	}
	if row.Vendor.SinglePublish != nil {
		sp := *row.Vendor.SinglePublish
		sp.MsgsPerS, sp.Method = e.VendorSinglePublish.Median, sp.Method+note
		row.Vendor.SinglePublish = &sp
		row.SinglePublishRatio = e.SinglePublishRatio.Median
	}
	row.PublishRatio = e.PublishRatio.Median
	row.ConsumeRatio = e.ConsumeRatio.Median
	return row
}

// RatioText is the publish or consume ratio with its interval over the
// rounds: "0.93 [0.84–0.97]", or "0.93" from one round (EstimateText
// says how the interval is to be read).
func (b *BrokerCalibration) RatioText(publish bool) string {
	r := b.ConsumeRatio
	if publish {
		r = b.PublishRatio
	}
	if e := b.Estimates; e != nil && r > 0 {
		if publish {
			return IntervalText(e.PublishRatio, RatioText)
		}
		return IntervalText(e.ConsumeRatio, RatioText)
	}
	return RatioText(r)
}

// SingleRatioText is RatioText for the second publish row ("" without one).
func (b *BrokerCalibration) SingleRatioText() string {
	switch {
	case b.Vendor.SinglePublish == nil:
		return ""
	case b.Estimates != nil && b.Estimates.SinglePublishRatio != nil && b.SinglePublishRatio > 0:
		return IntervalText(*b.Estimates.SinglePublishRatio, RatioText)
	}
	return RatioText(b.SinglePublishRatio)
}

// IntervalText is an estimate as "median [lo–hi]" (the interval at
// e.Confidence, which LevelText names), or the median alone from one
// round, each value written by f.
func IntervalText(e Estimate, f func(float64) string) string {
	if e.N < 2 {
		return f(e.Median)
	}
	return f(e.Median) + " [" + f(e.Lo) + "–" + f(e.Hi) + "]"
}

// LevelText says how IntervalText's brackets over n rounds are to be
// read: "95% interval of the median over 7 rounds", "range of 3 rounds
// (75% interval of the median)", or "single round: no interval".
func LevelText(n int) string {
	if n < 2 {
		return "single round: no interval"
	}
	e := EstimateOf(make([]float64, n))
	if n < 6 {
		return fmt.Sprintf("range of %d rounds (%.0f%% interval of the median)", n, 100*e.Confidence)
	}
	return fmt.Sprintf("%.0f%% interval of the median over %d rounds", 100*e.Confidence, n)
}

// Ratios fills PublishRatio, ConsumeRatio and SinglePublishRatio from the
// two sides.
func (b *BrokerCalibration) Ratios() {
	ratio := func(d, v float64) float64 {
		if d <= 0 || v <= 0 {
			return 0
		}
		return d / v
	}
	b.PublishRatio = ratio(b.Driver.Publish.MsgsPerS, b.Vendor.Publish.MsgsPerS)
	b.ConsumeRatio = ratio(b.Driver.Consume.MsgsPerS, b.Vendor.Consume.MsgsPerS)
	if sp := b.Vendor.SinglePublish; sp != nil {
		b.SinglePublishRatio = ratio(b.Driver.Publish.MsgsPerS, sp.MsgsPerS)
	}
}

// HasThroughput reports whether the row measured throughput (a
// calibration at rates alone does not).
func (b *BrokerCalibration) HasThroughput() bool {
	return b.Vendor.Publish.MsgsPerS > 0 || b.Driver.Publish.MsgsPerS > 0 || b.Vendor.Publish.Error != "" || b.Driver.Publish.Error != "" ||
		(b.Error != "" && len(b.AtRate) == 0)
}

// RatioText formats a driver/vendor ratio ("0.93") or "-".
func RatioText(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", r)
}

// Write stores c as dir/calibrate.json.
func (c *Calibration) Write(dir string) (string, error) { return writeRunFile(dir, CalibrationFile, c) }

// ReadCalibration loads dir/calibrate.json (or the file itself).
func ReadCalibration(path string) (*Calibration, error) {
	var c Calibration
	if err := readRunFile(path, CalibrationFile, &c, &c.SchemaVersion, CalibrationSchemaVersion); err != nil {
		return nil, err
	}
	return &c, nil
}

// LatestCalibration returns the newest calibrate.json (by started_at)
// with throughput figures among the run directories under root, and its
// directory; nil, "" when there is none. Unreadable files are skipped.
func LatestCalibration(root string) (*Calibration, string) {
	return latestCalibration(root, (*Calibration).HasThroughput)
}

// LatestRateCalibration is LatestCalibration for calibrations at rates
// (`bench calibrate --rate`): the newest with latency figures.
func LatestRateCalibration(root string) (*Calibration, string) {
	return latestCalibration(root, (*Calibration).HasRates)
}

func latestCalibration(root string, keep func(*Calibration) bool) (*Calibration, string) {
	paths, _ := filepath.Glob(filepath.Join(root, "*", CalibrationFile))
	var cals []*Calibration
	dirs := map[*Calibration]string{}
	for _, p := range paths {
		if c, err := ReadCalibration(p); err == nil && keep(c) {
			cals = append(cals, c)
			dirs[c] = filepath.Dir(p)
		}
	}
	if len(cals) == 0 {
		return nil, ""
	}
	sort.Slice(cals, func(i, j int) bool { return cals[i].StartedAt.After(cals[j].StartedAt) })
	return cals[0], dirs[cals[0]]
}

// HasThroughput reports whether any broker of c measured throughput.
func (c *Calibration) HasThroughput() bool {
	for i := range c.Brokers {
		if c.Brokers[i].HasThroughput() {
			return true
		}
	}
	return false
}

// HasRates reports whether any broker of c was calibrated at a rate.
func (c *Calibration) HasRates() bool {
	for i := range c.Brokers {
		if len(c.Brokers[i].AtRate) > 0 {
			return true
		}
	}
	return false
}

// Broker returns the row of a broker, or nil.
func (c *Calibration) Broker(name string) *BrokerCalibration {
	for i := range c.Brokers {
		if c.Brokers[i].Broker == name {
			return &c.Brokers[i]
		}
	}
	return nil
}
