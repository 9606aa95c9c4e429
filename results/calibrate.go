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
	// side has no figure.
	PublishRatio float64 `json:"publish_ratio"`
	ConsumeRatio float64 `json:"consume_ratio"`
	// Rounds are each round's rates and ratios when there were several;
	// then the sides' msgs/s are the medians of the rounds' and the ratios
	// the medians of the rounds' ratios (each measured side by side).
	Rounds []CalibrationRound `json:"rounds,omitempty"`
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
}

// Measurement is one rate.
type Measurement struct {
	MsgsPerS float64 `json:"msgs_per_s"`
	Messages int64   `json:"messages"`
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
}

// VendorFirst says whether the vendor tool runs before the driver in
// round i (from 0): the order alternates, so that what the first side
// leaves behind (page cache, log segments, a warm JIT) does not always
// favour the same one.
func VendorFirst(round int) bool { return round%2 == 0 }

// CombineRounds makes one row of a broker's rounds (each with its ratios
// filled): the first round's sides (tools, commands, series), with the
// rates replaced by the medians over the rounds that have them, and the
// ratios by the medians of the rounds' ratios. One round is returned as
// it is.
func CombineRounds(rounds []BrokerCalibration) BrokerCalibration {
	if len(rounds) == 0 {
		return BrokerCalibration{}
	}
	row := rounds[0]
	if len(rounds) == 1 {
		return row
	}
	med := func(get func(b *BrokerCalibration) float64) float64 {
		var v []float64
		for i := range rounds {
			if x := get(&rounds[i]); x > 0 {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return 0
		}
		sort.Float64s(v)
		return median(v)
	}
	row.Rounds = nil
	for i := range rounds {
		b := &rounds[i]
		row.Rounds = append(row.Rounds, CalibrationRound{VendorFirst: VendorFirst(i),
			VendorPublish: b.Vendor.Publish.MsgsPerS, DriverPublish: b.Driver.Publish.MsgsPerS,
			VendorConsume: b.Vendor.Consume.MsgsPerS, DriverConsume: b.Driver.Consume.MsgsPerS,
			PublishRatio: b.PublishRatio, ConsumeRatio: b.ConsumeRatio})
		if row.Error == "" {
			row.Error = b.Error
		}
	}
	note := fmt.Sprintf("; median of %d rounds", len(rounds))
	for _, m := range []struct {
		dst *Measurement
		get func(b *BrokerCalibration) float64
	}{
		{&row.Vendor.Publish, func(b *BrokerCalibration) float64 { return b.Vendor.Publish.MsgsPerS }},
		{&row.Driver.Publish, func(b *BrokerCalibration) float64 { return b.Driver.Publish.MsgsPerS }},
		{&row.Vendor.Consume, func(b *BrokerCalibration) float64 { return b.Vendor.Consume.MsgsPerS }},
		{&row.Driver.Consume, func(b *BrokerCalibration) float64 { return b.Driver.Consume.MsgsPerS }},
	} {
		m.dst.MsgsPerS = med(m.get)
		m.dst.Method += note
	}
	row.PublishRatio = med(func(b *BrokerCalibration) float64 { return b.PublishRatio })
	row.ConsumeRatio = med(func(b *BrokerCalibration) float64 { return b.ConsumeRatio })
	return row
}

// RatioText is the publish or consume ratio with the rounds' range:
// "0.93 [0.84–0.97]", or "0.93" from one round.
func (b *BrokerCalibration) RatioText(publish bool) string {
	r := b.ConsumeRatio
	if publish {
		r = b.PublishRatio
	}
	if rg := b.RatioRange(publish); rg != "" && r > 0 {
		return RatioText(r) + " [" + rg + "]"
	}
	return RatioText(r)
}

// RatioRange is the lowest and highest of the rounds' publish or consume
// ratios ("0.84–0.97"), or "" with fewer than two rounds.
func (b *BrokerCalibration) RatioRange(publish bool) string {
	if len(b.Rounds) < 2 {
		return ""
	}
	lo, hi := 0.0, 0.0
	for _, r := range b.Rounds {
		v := r.ConsumeRatio
		if publish {
			v = r.PublishRatio
		}
		if v <= 0 {
			continue
		}
		if lo == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	if lo == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}

// Ratios fills PublishRatio and ConsumeRatio from the two sides.
func (b *BrokerCalibration) Ratios() {
	ratio := func(d, v float64) float64 {
		if d <= 0 || v <= 0 {
			return 0
		}
		return d / v
	}
	b.PublishRatio = ratio(b.Driver.Publish.MsgsPerS, b.Vendor.Publish.MsgsPerS)
	b.ConsumeRatio = ratio(b.Driver.Consume.MsgsPerS, b.Vendor.Consume.MsgsPerS)
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
// among the run directories under root, and its directory; nil, "" when
// there is none. Unreadable files are skipped.
func LatestCalibration(root string) (*Calibration, string) {
	paths, _ := filepath.Glob(filepath.Join(root, "*", CalibrationFile))
	var cals []*Calibration
	dirs := map[*Calibration]string{}
	for _, p := range paths {
		if c, err := ReadCalibration(p); err == nil {
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

// Broker returns the row of a broker, or nil.
func (c *Calibration) Broker(name string) *BrokerCalibration {
	for i := range c.Brokers {
		if c.Brokers[i].Broker == name {
			return &c.Brokers[i]
		}
	}
	return nil
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
