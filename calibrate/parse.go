package calibrate

// Parsers of the vendor tools' console output. Each returns the figures a
// tool printed and the rate calibrate reports from them; how that rate is
// derived is spelled out in Figure.Method, because every tool reports
// differently (5 s windows, 1 s samples, a sliding 9 s window, a summary).

import (
	"bufio"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/results"
)

// Figure is one measured rate and how it was derived from the output.
type Figure struct {
	MsgsPerS float64
	Messages int64  // messages the figure counts (0 when the tool prints none)
	Method   string // one sentence: which lines, which window
	// Series holds the per-interval rates or counts the figure came from,
	// for the record (msgs/s per report line).
	Series []float64
}

// ErrNoReport means the output holds no report line to compute a rate from.
var ErrNoReport = errors.New("no report line in the tool's output")

// --- Kafka ProducerPerformance ---------------------------------------

// producerPerfRE matches ProducerPerformance's periodic window line
// (every 5 s): "123 records sent, 24.6 records/sec (0.02 MB/sec), 1.0 ms
// avg latency, 5.0 ms max latency." The final summary has percentiles
// after "max latency", so it does not end with "latency.".
var producerPerfRE = regexp.MustCompile(`^(\d+) records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max (?:latency\.|latency, )`)

// ParseProducerPerformance reads Kafka ProducerPerformance output. Each
// report line covers one window (count / rate = its length); windows that
// start before warmup are dropped, and the figure is the records of the
// remaining windows over their total length. The final summary (printed
// only when --num-records is reached) covers the whole run, warm-up
// included, so it is not used when windows are there.
func ParseProducerPerformance(out string, warmup time.Duration) (Figure, error) {
	type window struct {
		n     int64
		secs  float64
		start float64
	}
	var ws []window
	var at float64
	var summary *window
	for _, r := range recordsLines(out, producerPerfRE) {
		if r.rate <= 0 {
			continue
		}
		w := window{n: r.n, secs: float64(r.n) / r.rate, start: at}
		if strings.HasSuffix(r.m[0], "max latency, ") {
			summary = &w
			continue
		}
		ws = append(ws, w)
		at += w.secs
	}
	if len(ws) == 0 && summary == nil {
		return Figure{}, fmt.Errorf("ProducerPerformance: %w (want lines like \"N records sent, R records/sec …\")", ErrNoReport)
	}
	if len(ws) == 0 {
		return Figure{MsgsPerS: float64(summary.n) / summary.secs, Messages: summary.n,
			Method: "ProducerPerformance final summary (whole run, warm-up included: the run was shorter than one 5 s report window)"}, nil
	}
	f := Figure{Method: fmt.Sprintf("ProducerPerformance 5 s report windows starting at or after %s (warm-up dropped): records / window time", warmup)}
	var n int64
	var secs float64
	for _, w := range ws {
		f.Series = append(f.Series, float64(w.n)/w.secs)
		f.Messages += w.n
		if w.start+0.001 >= warmup.Seconds() {
			n += w.n
			secs += w.secs
		}
	}
	if secs == 0 { // every window started inside the warm-up
		for _, w := range ws {
			n += w.n
			secs += w.secs
		}
		f.Method = "ProducerPerformance report windows, all of them (the run was too short to drop the warm-up)"
	}
	f.MsgsPerS = float64(n) / secs
	return f, nil
}

// recordsLine is a ProducerPerformance line a pattern matched: its
// submatches, and the records (m[1]) and records/sec (m[2]) it reports.
type recordsLine struct {
	m    []string
	n    int64
	rate float64
}

// recordsLines are the lines of out that re matches, in order.
func recordsLines(out string, re *regexp.Regexp) []recordsLine {
	var rs []recordsLine
	for _, line := range lines(out) {
		if m := re.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			rate, _ := strconv.ParseFloat(m[2], 64)
			rs = append(rs, recordsLine{m: m, n: n, rate: rate})
		}
	}
	return rs
}

// producerPerfSummaryRE matches ProducerPerformance's final summary, the
// only line with percentiles (whole run, in ms): "N records sent, R
// records/sec (M MB/sec), A ms avg latency, X ms max latency, P ms 50th,
// P ms 95th, P ms 99th, P ms 99.9th."
var producerPerfSummaryRE = regexp.MustCompile(`^(\d+) records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, (\d+) ms 50th, \d+ ms 95th, (\d+) ms 99th`)

// ParseProducerPerformanceAtRate reads a ProducerPerformance run at a
// rate (--throughput) that ran to its --num-records: its summary's
// records/sec and its send → ack p50 and p99 (ms, as µs). The summary
// covers the whole run, the producer's start included; the tool prints
// no percentiles per window.
func ParseProducerPerformanceAtRate(out string) (results.RateFigures, error) {
	for _, r := range recordsLines(out, producerPerfSummaryRE) {
		p50, _ := strconv.ParseInt(r.m[3], 10, 64)
		p99, _ := strconv.ParseInt(r.m[4], 10, 64)
		// 0 ms is "under a millisecond": half of one, not nothing.
		ms := func(v int64) int64 { return max(500, v*1000) }
		return results.RateFigures{Achieved: r.rate, Messages: r.n, PublishP50: ms(p50), PublishP99: ms(p99)}, nil
	}
	return results.RateFigures{}, fmt.Errorf("ProducerPerformance: %w (want its final summary \"N records sent, … ms 50th, … ms 99th, …\": the run must reach --num-records)", ErrNoReport)
}

// --- Kafka ConsumerPerformance ---------------------------------------

// ParseConsumerPerformance reads Kafka ConsumerPerformance's summary (a
// header line and one data line, comma separated). The figure is
// fetch.nMsg.sec: messages over the fetch time, which excludes the group
// join (rebalance.time.ms); nMsg.sec would include it.
func ParseConsumerPerformance(out string) (Figure, error) {
	return consumerSummary(out, "ConsumerPerformance", "fetch.nMsg.sec",
		"ConsumerPerformance fetch.nMsg.sec: messages over the fetch time, group join excluded")
}

// ParseShareConsumerPerformance reads Kafka ShareConsumerPerformance's
// summary: ConsumerPerformance's header and data line without the fetch
// columns (a share consumer does not rebalance), so the figure is
// nMsg.sec: messages over the time from the consumers' start to the last
// record, their joining included.
func ParseShareConsumerPerformance(out string) (Figure, error) {
	return consumerSummary(out, "ShareConsumerPerformance", "nMsg.sec",
		"ShareConsumerPerformance nMsg.sec: messages over the time from the consumers' start to the last record (the share group's joining included)")
}

// consumerSummary reads the summary of Kafka's consumer perf tools: a
// "start.time, end.time, …" header and one data line, whose column rate
// is the figure and data.consumed.in.nMsg the messages.
func consumerSummary(out, tool, rate, method string) (Figure, error) {
	var header []string
	for _, line := range lines(out) {
		fields := splitCSV(line)
		if len(fields) > 0 && fields[0] == "start.time" {
			header = fields
			continue
		}
		if header == nil || len(fields) != len(header) {
			continue
		}
		row := map[string]string{}
		for i, h := range header {
			row[h] = fields[i]
		}
		r, err1 := strconv.ParseFloat(row[rate], 64)
		n, err2 := strconv.ParseInt(row["data.consumed.in.nMsg"], 10, 64)
		if err1 != nil || err2 != nil {
			return Figure{}, fmt.Errorf("%s: data line %q: %s or data.consumed.in.nMsg is not a number", tool, line, rate)
		}
		return Figure{MsgsPerS: r, Messages: n, Method: method}, nil
	}
	return Figure{}, fmt.Errorf("%s: %w (want a \"start.time, end.time, …\" header and a data line)", tool, ErrNoReport)
}

func splitCSV(line string) []string {
	parts := strings.Split(line, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// --- RabbitMQ PerfTest -------------------------------------------------

var (
	perfTestTimeRE = regexp.MustCompile(`^id: [^,]+, time ([\d.]+) s`)
	perfTestRateRE = regexp.MustCompile(`(sent|confirmed|nacked|returned|received): ([\d.]+) msg/s`)
)

// perfTestSample is one report line of PerfTest (every second by default).
type perfTestSample struct {
	at    float64            // seconds since the test started
	rates map[string]float64 // sent, confirmed, nacked, returned, received
}

func parsePerfTest(out string) []perfTestSample {
	var ss []perfTestSample
	for _, line := range lines(out) {
		m := perfTestTimeRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		s := perfTestSample{at: at, rates: map[string]float64{}}
		for _, r := range perfTestRateRE.FindAllStringSubmatch(line, -1) {
			s.rates[r[1]], _ = strconv.ParseFloat(r[2], 64)
		}
		ss = append(ss, s)
	}
	return ss
}

// ParsePerfTestPublish reads a producers-only PerfTest run. Each report
// line is the rate over the interval since the previous one; the figure is
// the confirmed rate averaged over the intervals that end after warmup
// (weighted by their length).
func ParsePerfTestPublish(out string, warmup time.Duration) (Figure, error) {
	ss := parsePerfTest(out)
	if len(ss) == 0 {
		return Figure{}, fmt.Errorf("PerfTest: %w (want lines like \"id: …, time 1.000 s, sent: N msg/s, confirmed: N msg/s\")", ErrNoReport)
	}
	f := Figure{Method: fmt.Sprintf("PerfTest confirmed msg/s, 1 s samples after %s (warm-up dropped), weighted by interval", warmup)}
	var n, secs, allN, allSecs, prev float64
	for _, s := range ss {
		r, ok := s.rates["confirmed"]
		if !ok {
			return Figure{}, fmt.Errorf("PerfTest: report line at %.3f s has no confirmed rate: run it with --confirm", s.at)
		}
		d := s.at - prev
		prev = s.at
		f.Series = append(f.Series, r)
		allN += r * d
		allSecs += d
		if s.at-d+0.001 >= warmup.Seconds() {
			n += r * d
			secs += d
		}
	}
	if secs == 0 {
		n, secs = allN, allSecs
		f.Method = "PerfTest confirmed msg/s over every sample (the run was too short to drop the warm-up)"
	}
	f.MsgsPerS = n / secs
	f.Messages = int64(allN + 0.5)
	return f, nil
}

// ParsePerfTestConsume reads a consumers-only PerfTest drain: the received
// rate of each 1 s sample is turned into a count, and the figure is the
// drain rate over its full seconds (see DrainRate).
func ParsePerfTestConsume(out string) (Figure, error) {
	ss := parsePerfTest(out)
	if len(ss) == 0 {
		return Figure{}, fmt.Errorf("PerfTest: %w (want lines like \"id: …, time 1.000 s, received: N msg/s\")", ErrNoReport)
	}
	var counts []float64
	var prev float64
	for _, s := range ss {
		r, ok := s.rates["received"]
		if !ok {
			return Figure{}, fmt.Errorf("PerfTest: report line at %.3f s has no received rate: run it with consumers", s.at)
		}
		counts = append(counts, r*(s.at-prev))
		prev = s.at
	}
	return drainFigure("PerfTest received msg/s, 1 s samples", counts)
}

// perfTestSummaryRE matches the latency lines of PerfTest's summary:
// "id: X, consumer latency min/median/75th/95th/99th 173/510/828/9995/19993 µs"
// (and "confirm latency …"), in µs unless run with --use-millis.
var (
	perfTestSummaryRE    = regexp.MustCompile(`^id: [^,]+, (consumer|confirm) latency min/median/75th/95th/99th (\d+)/(\d+)/\d+/\d+/(\d+) (µs|ms)`)
	perfTestSendingAvgRE = regexp.MustCompile(`^id: [^,]+, sending rate avg: ([\d.]+) msg/s`)
)

// ParsePerfTestAtRate reads a PerfTest run with producers at --rate and
// consumers: from its summary, the sending rate, the confirm latency
// (send → confirm) and the consumer latency (the send time PerfTest
// writes into each body → the consumer) p50 and p99. PerfTest's summary
// covers the run from the moment all its producers and consumers
// started, from a reservoir sample (Dropwizard's exponentially decaying
// one); the messages are the per-second received rates summed.
func ParsePerfTestAtRate(out string) (results.RateFigures, error) {
	var f results.RateFigures
	var latencies int
	for _, line := range lines(out) {
		if m := perfTestSendingAvgRE.FindStringSubmatch(line); m != nil {
			f.Achieved, _ = strconv.ParseFloat(m[1], 64)
			continue
		}
		m := perfTestSummaryRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		unit := int64(1)
		if m[5] == "ms" {
			unit = 1000
		}
		p50, _ := strconv.ParseInt(m[3], 10, 64)
		p99, _ := strconv.ParseInt(m[4], 10, 64)
		if m[1] == "confirm" {
			f.PublishP50, f.PublishP99 = p50*unit, p99*unit
		} else {
			f.E2EP50, f.E2EP99 = p50*unit, p99*unit
		}
		latencies++
	}
	var prev, n float64
	for _, s := range parsePerfTest(out) {
		n += s.rates["received"] * (s.at - prev)
		prev = s.at
	}
	f.Messages = int64(n + 0.5)
	if latencies < 2 || f.Achieved == 0 {
		return f, fmt.Errorf("PerfTest: %w (want its summary: \"sending rate avg\", \"consumer latency …\" and \"confirm latency …\"; run it with --confirm and consumers until it stops by --time)", ErrNoReport)
	}
	return f, nil
}

// --- RocketMQ benchmark Producer and Consumer -----------------------

var (
	rmqSendRE    = regexp.MustCompile(`^Current Time: .*\| Send TPS: (\d+) \|`)
	rmqConsumeRE = regexp.MustCompile(`^Current Time: .*\| Consume TPS: (\d+) \|`)
)

// rmqWindow is the span of the RocketMQ benchmark's TPS: it keeps the
// last 10 one-second snapshots and divides the difference between the
// oldest and the newest, so each line covers 9 s. The first line comes
// once 10 snapshots exist; with a report interval of 1 s, line k (from 1)
// covers seconds k to k+9 after the tool's timer started.
const rmqWindow = 9

// ParseRocketMQProducer reads the benchmark Producer's report lines (run
// with -ri 1000). The figure is the last line's Send TPS: the 9 s before
// the tool was stopped, which leaves the warm-up out once the run lasted
// warmup + 9 s.
func ParseRocketMQProducer(out string, warmup time.Duration) (Figure, error) {
	var tps []float64
	var complete int64
	for _, line := range lines(out) {
		if m := rmqSendRE.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			tps = append(tps, v)
		}
		if n, ok := rmqCompleteTotal(line); ok {
			complete = n
		}
	}
	if len(tps) == 0 {
		return Figure{}, fmt.Errorf("RocketMQ benchmark Producer: %w (want \"Current Time: … | Send TPS: N | …\" lines; they start 10 s after launch, with -ri 1000)", ErrNoReport)
	}
	f := Figure{MsgsPerS: tps[len(tps)-1], Series: tps, Messages: complete,
		Method: "RocketMQ benchmark Producer Send TPS of its last report: sends over the last 9 s before it was stopped"}
	if start := len(tps); float64(start) < warmup.Seconds() {
		f.Method += fmt.Sprintf(" (that window starts %d s after launch, inside the %s warm-up: run longer)", start, warmup)
	}
	return f, nil
}

// rmqBatchRE matches BatchProducer's report line, which has the sends
// (TPS) and the messages they carried (MPS) over the same 9 s window.
var rmqBatchRE = regexp.MustCompile(`^Current Time: .*\| Send TPS: (\d+) \| Send MPS: (\d+) \|`)

// ParseRocketMQBatchProducer reads the benchmark BatchProducer's report
// lines (run with -ri 1000). The figure is the last line's Send MPS:
// messages sent over the last 9 s before the tool was stopped.
func ParseRocketMQBatchProducer(out string, warmup time.Duration) (Figure, error) {
	var mps []float64
	for _, line := range lines(out) {
		if m := rmqBatchRE.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			mps = append(mps, v)
		}
	}
	if len(mps) == 0 {
		return Figure{}, fmt.Errorf("RocketMQ benchmark BatchProducer: %w (want \"Current Time: … | Send TPS: N | Send MPS: M | …\" lines; they start 10 s after launch, with -ri 1000)", ErrNoReport)
	}
	f := Figure{MsgsPerS: mps[len(mps)-1], Series: mps,
		Method: "RocketMQ benchmark BatchProducer Send MPS of its last report: messages sent over the last 9 s before it was stopped"}
	if start := len(mps); float64(start) < warmup.Seconds() {
		f.Method += fmt.Sprintf(" (that window starts %d s after launch, inside the %s warm-up: run longer)", start, warmup)
	}
	return f, nil
}

// rmqCompleteTotal reads "[Complete] Send Total: N …".
func rmqCompleteTotal(line string) (int64, bool) {
	const p = "[Complete] Send Total: "
	if !strings.HasPrefix(line, p) {
		return 0, false
	}
	f := strings.Fields(strings.TrimPrefix(line, p))
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	return n, err == nil
}

// RocketMQConsumeTPS returns the Consume TPS values of the benchmark
// Consumer's report lines, in order.
func RocketMQConsumeTPS(out string) []float64 {
	var tps []float64
	for _, line := range lines(out) {
		if m := rmqConsumeRE.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			tps = append(tps, v)
		}
	}
	return tps
}

// ParseRocketMQConsumer reads a benchmark Consumer drain (run with -ri
// 1000 until its TPS fell back to 0). Its lines are sliding 9 s windows
// one second apart, W(t) = messages in (t-9, t] / 9; per-second counts
// follow from the differences once the windows reach zero again:
// c(t-8) = 9·(W(t) − W(t+1)) + c(t+1). The figure is the drain rate over
// the full seconds of the drain (see DrainRate).
func ParseRocketMQConsumer(out string) (Figure, error) {
	tps := RocketMQConsumeTPS(out)
	if len(tps) == 0 {
		return Figure{}, fmt.Errorf("RocketMQ benchmark Consumer: %w (want \"Current Time: … | Consume TPS: N | …\" lines; they start 10 s after launch, with -ri 1000)", ErrNoReport)
	}
	last := len(tps) - 1
	if !anyPositive(tps) {
		return Figure{}, fmt.Errorf("RocketMQ benchmark Consumer: received nothing in %d report lines; seen when the broker had marked its disk full (its store.log says \"mark disk full\", and it cleans its commit log at once): free disk space and run again", len(tps))
	}
	if tps[last] != 0 {
		return Figure{}, fmt.Errorf("RocketMQ benchmark Consumer: the drain did not finish within the output (%d report lines, last TPS %.0f): per-second counts need the window to fall back to 0", len(tps), tps[last])
	}
	counts := unslide(tps, rmqWindow)
	return drainFigure("RocketMQ benchmark Consumer TPS (sliding 9 s windows, turned into per-second counts)", counts)
}

func anyPositive(v []float64) bool {
	for _, x := range v {
		if x > 0 {
			return true
		}
	}
	return false
}

// unslide turns sliding-window rates into per-second counts. w[i] is the
// rate over span seconds, one window per second: window i covers seconds
// i … i+span-1 (second 0 is the first second of the first window), so
// the result has len(w)+span-1 seconds. The last window must be 0 (the
// drain is over), which anchors the differences:
// c[i] = span·(w[i] − w[i+1]) + c[i+span]. Negative values from rounding
// are clamped to 0.
func unslide(w []float64, span int) []float64 {
	n := len(w) + span - 1
	c := make([]float64, n+span)
	d := func(i int) float64 {
		if i < 0 || i >= len(w) {
			return 0
		}
		return w[i] * float64(span)
	}
	// Window i covers counts c[i .. i+span-1]. Going backwards:
	// c[i] = D(i) − D(i+1) + c[i+span].
	for i := n - 1; i >= 0; i-- {
		c[i] = d(i) - d(i+1) + c[i+span]
	}
	out := c[:n]
	for i := range out {
		if out[i] < 0 {
			out[i] = 0
		}
	}
	return out
}

// --- drains -------------------------------------------------------------

// DrainRate is the rate of a drain given its per-second counts. The
// drain is the run of seconds around the busiest one whose counts reach
// drainFloor of it (smaller counts before or after are stragglers, or
// rounding noise of a reconstruction); the figure is the messages of its
// seconds strictly between the first and the last, over their number —
// the first and last seconds are partial (start-up, tail) and are
// dropped. A drain shorter than three seconds falls back to all its
// messages over all its seconds (a lower bound). It returns the rate and
// the number of seconds it used, and whether the partial edges were
// dropped.
func DrainRate(counts []float64) (rate float64, secs int, edgesDropped bool) {
	peakAt, peak := 0, 0.0
	for i, v := range counts {
		if v > peak {
			peakAt, peak = i, v
		}
	}
	if peak == 0 {
		return 0, 0, false
	}
	first, last := peakAt, peakAt
	for first > 0 && counts[first-1] >= peak*drainFloor {
		first--
	}
	for last < len(counts)-1 && counts[last+1] >= peak*drainFloor {
		last++
	}
	if last-first >= 2 {
		var n float64
		for _, v := range counts[first+1 : last] {
			n += v
		}
		return n / float64(last-first-1), last - first - 1, true
	}
	var n float64
	for _, v := range counts[first : last+1] {
		n += v
	}
	return n / float64(last-first+1), last - first + 1, false
}

// drainFloor is the share of the busiest second below which a second is
// not part of the drain.
const drainFloor = 0.05

func drainFigure(source string, counts []float64) (Figure, error) {
	rate, secs, dropped := DrainRate(counts)
	if secs == 0 {
		return Figure{}, fmt.Errorf("%s: no message was consumed", source)
	}
	var total float64
	for _, v := range counts {
		total += v
	}
	method := fmt.Sprintf("%s: messages of the drain's %d full seconds over their number (the partial first and last seconds dropped)", source, secs)
	if !dropped {
		method = fmt.Sprintf("%s: all messages over the drain's %d seconds (too short to drop partial seconds: a lower bound)", source, secs)
	}
	return Figure{MsgsPerS: rate, Messages: int64(total + 0.5), Method: method, Series: counts}, nil
}

func lines(out string) []string {
	var ls []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		ls = append(ls, strings.TrimRight(sc.Text(), "\r"))
	}
	return ls
}
