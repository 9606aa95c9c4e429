package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inboxbench/inboxbench/calibrate"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/render"
)

// calibrateLong is bench calibrate's help; the vendor tools, listed from
// calibrate's registry, go between its two parts.
const (
	calibrateLongHead = `For each broker, runs the vendor's own perf tool (fetched from Maven Central
into <stack-dir>/calibrate) and then the Go driver on the same shape, one right
after the other, and prints publish and consume msgs/s of both and the
driver/vendor ratios:

`
	calibrateLongTail = `
Publish: each side sends into a fresh topic (created by the driver's Setup, so
shards, queue type and durability match) for --duration, every message
confirmed (acks=all, publisher confirms, synchronous send); the first
--warmup is left out of the figure. Consume: each side drains what it
published, as a new group; the consumer's start-up is left out.

With --rate R (or a list R1,R2): latency instead of throughput. Each side
publishes at the rate for --duration into a fresh topic with a consumer reading
live, and the table gives, per broker and rate, vendor and driver send→confirm
and publish→consume p50/p99 (RabbitMQ: PerfTest --rate with its confirm and
consumer latency; Kafka: ProducerPerformance --throughput, end to end against
the driver's raw consume since no Kafka tool measures it at a rate; RocketMQ:
its benchmark producers have no rate, so the driver side alone).

Results go to OUT/RUN_ID/calibrate.json; 'bench report OUT/RUN_ID' renders it,
and 'bench report' of a run under OUT shows the newest calibration at rates
beside the latencies of its fixed-rate cells. With --rounds, every figure is
the median with its confidence interval. The machine is shared by the broker,
the tool and the driver: run it on a quiet machine and repeat, the ratios are
steadier than the rates.`
	calibrateExample = `  bench calibrate
  bench calibrate --brokers kafka --duration 30s
  bench calibrate --rounds 3 --duration 10s      # medians of 3 interleaved rounds, with intervals
  bench calibrate --rate 4000 --rounds 3         # latency: vendor vs driver p50/p99 at 4,000 msgs/s
  bench calibrate --size 512 --shards 4 --producers 4 --consumers 4`
)

func newCalibrateCmd(cfg *config.Config) *cobra.Command {
	fl := calibrateFlags{shape: calibrate.DefaultShape()}
	cmd := &cobra.Command{
		Use:     "calibrate",
		Short:   "Measure each broker's vendor perf tool, then the Go driver on the same shape, and print the ratios",
		Long:    calibrateLongHead + vendorTools() + calibrateLongTail,
		Example: calibrateExample,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runCalibrate(c, cfg, &fl)
		},
	}
	fl.register(cmd.Flags())
	return cmd
}

// calibrateFlags are the flags of 'bench calibrate'.
type calibrateFlags struct {
	brokers, out, runID, rates string
	duration, warmup, maxDrain time.Duration
	rounds                     int
	shape                      results.Shape
}

func (fl *calibrateFlags) register(f *pflag.FlagSet) {
	shape := &fl.shape
	f.StringVar(&fl.brokers, "brokers", strings.Join(calibrate.Brokers(), ","), "comma-separated brokers: "+strings.Join(calibrate.Brokers(), ", "))
	f.StringVar(&fl.out, "out", "results", "directory that receives the run directory")
	f.StringVar(&fl.runID, "run-id", "", "name of the run directory (default: calibrate-<UTC timestamp>)")
	f.IntVar(&shape.MessageSize, "size", shape.MessageSize, "message size in bytes")
	f.IntVar(&shape.Shards, "shards", shape.Shards, "queues/partitions of each topic")
	f.IntVar(&shape.Producers, "producers", shape.Producers, "publishers: driver goroutines, PerfTest producer connections, RocketMQ send threads (Kafka's ProducerPerformance has one client)")
	f.IntVar(&shape.Consumers, "consumers", shape.Consumers, "PerfTest consumers and RocketMQ consume threads (the driver consumes each shard on its own; ConsumerPerformance has one client)")
	f.IntVar(&shape.Batch, "batch", shape.Batch, "driver messages per Publish call, and PerfTest's confirm window per channel")
	f.IntVar(&shape.Prefetch, "prefetch", shape.Prefetch, "unacknowledged deliveries per shard (driver) and per consumer (PerfTest --qos)")
	f.IntVar(&shape.MaxBatch, "max-batch", shape.MaxBatch, "driver handler batch: 1 acks each delivery like the vendor consumers; more shows what batch delivery gains (not the vendor's shape)")
	f.DurationVar(&fl.duration, "duration", 20*time.Second, "how long each side publishes")
	f.DurationVar(&fl.warmup, "warmup", 5*time.Second, "start of each publish left out of the figure (JVM and client warm-up)")
	f.IntVar(&fl.rounds, "rounds", 1, "measure both sides this many times, alternating which goes first, and report medians with their confidence intervals (rates on a shared machine move by tens of percent from one run to the next)")
	f.DurationVar(&fl.maxDrain, "max-drain", 60*time.Second, "longest a drain may take; a slower drain is cut and its figure covers what arrived")
	f.StringVar(&fl.rates, "rate", "", "calibrate latency at these rates instead of throughput: messages per second, comma-separated (e.g. 4000 or 1000,4000)")
}

// runCalibrate is bench calibrate: it checks the brokers answer, runs the
// calibration, prints and writes it, and fails when a broker's could not
// be measured.
func runCalibrate(c *cobra.Command, cfg *config.Config, fl *calibrateFlags) error {
	bs, err := parseBrokers(fl.brokers)
	if err != nil {
		return err
	}
	stack, err := compose.NewEnv(*cfg, os.Stderr)
	if err != nil {
		return err
	}
	rates, err := parseRates(fl.rates)
	if err != nil {
		return err
	}
	runID := fl.runID
	if runID == "" {
		runID = "calibrate-" + time.Now().UTC().Format("20060102-150405")
	}
	o := calibrate.Options{Brokers: bs, Shape: fl.shape, Duration: fl.duration, Warmup: fl.warmup, MaxDrain: fl.maxDrain, Rounds: fl.rounds, Rates: rates,
		Cfg: *cfg, Stack: stack, Progress: os.Stderr, RunID: runID}
	if err := o.Validate(); err != nil {
		return usageError{err}
	}
	// Calibrate needs no PostgreSQL: only the brokers are checked.
	if _, _, err := checkReachable(c.Context(), o.Stack, brokerServices(bs)); err != nil {
		return err
	}
	cal, err := calibrate.Run(c.Context(), o)
	if cal != nil {
		printCalibration(cal)
		p, werr := cal.Write(filepath.Join(fl.out, runID))
		if werr != nil {
			return werr
		}
		fmt.Printf("\ncalibration: %s\n", p)
	}
	if err != nil {
		return err
	}
	var failed []string
	for _, b := range cal.Brokers {
		if b.Error != "" {
			failed = append(failed, b.Broker+": "+b.Error)
		}
	}
	if len(failed) > 0 {
		return failure{"calibration incomplete:\n  " + strings.Join(failed, "\n  ")}
	}
	return nil
}

// vendorTools lists, one line each, the brokers calibrate measures and
// their vendor's tool.
func vendorTools() string {
	var b strings.Builder
	for _, name := range calibrate.Brokers() {
		fmt.Fprintf(&b, "  %-9s %s\n", name, calibrate.Tool(name))
	}
	return b.String()
}

// printCalibration prints the throughput table (a row per broker, the
// ratios with their intervals) and the latency table of a calibration at
// rates, as the report does.
func printCalibration(cal *results.Calibration) {
	table := func(header []string, rows [][]string) {
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(header, "\t"))+"\t")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		tw.Flush()
	}
	if cal.HasThroughput() {
		table(render.CalibrationHeader, render.CalibrationRows(cal))
	}
	if cal.HasRates() {
		if cal.HasThroughput() {
			fmt.Println()
		}
		table(render.CalibrationRateHeader, render.CalibrationRateRows(cal))
		for _, n := range render.CalibrationRateNotes(cal) {
			fmt.Printf("  %s\n", n)
		}
	}
	fmt.Printf("\n%s\n", render.CalibrationRoundsNote(cal))
	for _, b := range cal.Brokers {
		if b.Error != "" {
			fmt.Printf("\n%s: %s\n", b.Broker, b.Error)
		}
	}
}

// parseRates reads --rate: positive numbers, comma-separated.
func parseRates(list string) ([]float64, error) {
	var out []float64
	for _, p := range config.SplitList(list) {
		r, err := strconv.ParseFloat(p, 64)
		if err != nil || !(r > 0) {
			return nil, usagef("--rate %q: want messages per second, comma-separated positive numbers (e.g. 4000 or 1000,4000)", p)
		}
		out = append(out, r)
	}
	return out, nil
}
