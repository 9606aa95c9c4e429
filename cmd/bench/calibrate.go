package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/calibrate"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

func newCalibrateCmd(cfg *config.Config) *cobra.Command {
	var (
		brokerList, out, runID     string
		duration, warmup, maxDrain time.Duration
		rounds                     int
	)
	shape := calibrate.DefaultShape()
	cmd := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure each broker's vendor perf tool, then the Go driver on the same shape, and print the ratios",
		Long: `For each broker, runs the vendor's own perf tool (fetched from Maven Central
into <stack-dir>/calibrate) and then the Go driver on the same shape, one right
after the other, and prints publish and consume msgs/s of both and the
driver/vendor ratios:

` + vendorTools() + `
Publish: each side sends into a fresh topic (created by the driver's Setup, so
shards, queue type and durability match) for --duration, every message
confirmed (acks=all, publisher confirms, synchronous send); the first
--warmup is left out of the figure. Consume: each side drains what it
published, as a new group; the consumer's start-up is left out.

Results go to OUT/RUN_ID/calibrate.json; 'bench report OUT/RUN_ID' renders it.
The machine is shared by the broker, the tool and the driver: run it on a quiet
machine and repeat, the ratios are steadier than the rates.`,
		Example: `  bench calibrate
  bench calibrate --brokers kafka --duration 30s
  bench calibrate --rounds 3 --duration 10s      # medians of 3 interleaved rounds
  bench calibrate --size 512 --shards 4 --producers 4 --consumers 4`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			bs, err := parseBrokers(brokerList)
			if err != nil {
				return err
			}
			dir, err := compose.AbsDir(cfg.StackDir)
			if err != nil {
				return err
			}
			if runID == "" {
				runID = "calibrate-" + time.Now().UTC().Format("20060102-150405")
			}
			o := calibrate.Options{Brokers: bs, Shape: shape, Duration: duration, Warmup: warmup, MaxDrain: maxDrain, Rounds: rounds,
				Cfg: *cfg, Stack: &compose.Env{Dir: dir, Cfg: *cfg, Out: os.Stderr}, Progress: os.Stderr, RunID: runID}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			// Calibrate needs no PostgreSQL: only the brokers are checked.
			if _, err := checkReachable(c.Context(), o.Stack, brokerServices(bs)); err != nil {
				return err
			}
			cal, err := calibrate.Run(c.Context(), o)
			if cal != nil {
				printCalibration(cal)
				p, werr := cal.Write(filepath.Join(out, runID))
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
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokerList, "brokers", strings.Join(calibrate.Brokers(), ","), "comma-separated brokers: "+strings.Join(calibrate.Brokers(), ", "))
	f.StringVar(&out, "out", "results", "directory that receives the run directory")
	f.StringVar(&runID, "run-id", "", "name of the run directory (default: calibrate-<UTC timestamp>)")
	f.IntVar(&shape.MessageSize, "size", shape.MessageSize, "message size in bytes")
	f.IntVar(&shape.Shards, "shards", shape.Shards, "queues/partitions of each topic")
	f.IntVar(&shape.Producers, "producers", shape.Producers, "publishers: driver goroutines, PerfTest producer connections, RocketMQ send threads (Kafka's ProducerPerformance has one client)")
	f.IntVar(&shape.Consumers, "consumers", shape.Consumers, "PerfTest consumers and RocketMQ consume threads (the driver consumes each shard on its own; ConsumerPerformance has one client)")
	f.IntVar(&shape.Batch, "batch", shape.Batch, "driver messages per Publish call, and PerfTest's confirm window per channel")
	f.IntVar(&shape.Prefetch, "prefetch", shape.Prefetch, "unacknowledged deliveries per shard (driver) and per consumer (PerfTest --qos)")
	f.IntVar(&shape.MaxBatch, "max-batch", shape.MaxBatch, "driver handler batch: 1 acks each delivery like the vendor consumers; more shows what batch delivery gains (not the vendor's shape)")
	f.DurationVar(&duration, "duration", 20*time.Second, "how long each side publishes")
	f.DurationVar(&warmup, "warmup", 5*time.Second, "start of each publish left out of the figure (JVM and client warm-up)")
	f.IntVar(&rounds, "rounds", 1, "measure both sides this many times, alternating which goes first, and report medians with the ratios' range (rates on a shared machine move by tens of percent from one run to the next)")
	f.DurationVar(&maxDrain, "max-drain", 60*time.Second, "longest a drain may take; a slower drain is cut and its figure covers what arrived")
	return cmd
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

// printCalibration prints one row per broker: vendor and driver publish
// and consume rates and the ratios.
func printCalibration(cal *results.Calibration) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BROKER\tVENDOR PUBLISH/S\tDRIVER PUBLISH/S\tRATIO\tVENDOR CONSUME/S\tDRIVER CONSUME/S\tRATIO\t")
	for _, b := range cal.Brokers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", b.Broker,
			results.FormatRate(b.Vendor.Publish.MsgsPerS), results.FormatRate(b.Driver.Publish.MsgsPerS), b.RatioText(true),
			results.FormatRate(b.Vendor.Consume.MsgsPerS), results.FormatRate(b.Driver.Consume.MsgsPerS), b.RatioText(false))
	}
	tw.Flush()
	if cal.Shape.Rounds > 1 {
		fmt.Printf("\nmedians of %d rounds; in brackets the range of the rounds' ratios\n", cal.Shape.Rounds)
	}
	for _, b := range cal.Brokers {
		if b.Error != "" {
			fmt.Printf("\n%s: %s\n", b.Broker, b.Error)
		}
	}
}
