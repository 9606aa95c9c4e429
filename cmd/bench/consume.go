package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/runner"
)

const consumeLong = `The suite's own consumer, run the way a team's service runs under
'bench run --service' and 'bench conform --service': it reads where to
consume and where to apply from the environment a service cell hands each
instance (INBOXBENCH_BROKER, INBOXBENCH_TOPIC, INBOXBENCH_GROUP,
INBOXBENCH_SCHEMA, INBOXBENCH_CONSUMER, INBOXBENCH_SHARDS and the
endpoints; docs/services.md), migrates the inbox schema once, prints one
line when it consumes, and applies every delivery with --strategy until
SIGTERM.

Its spec is examples/services/bench-consume/service.yaml: putting known
code under test shows what the outside view sees of a correct consumer,
beside the built-in cells that judge the same code from the inside.`

func newConsumeCmd(cfg *config.Config) *cobra.Command {
	var strategy string
	var consumers, batch int
	cmd := &cobra.Command{
		Use:     "consume",
		Short:   "Run the suite's own consumer as a service under test (started by a service cell)",
		Long:    consumeLong,
		Example: "  bench run --brokers rabbitmq,kafka --workload smoke --service examples/services/bench-consume/service.yaml",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o := runner.ConsumeOptions{Cfg: *cfg, Strategy: strategy, Consumers: consumers, BatchSize: batch,
				Console: runner.Console{Progress: os.Stderr}}
			for _, v := range []struct {
				name string
				to   *string
			}{{"INBOXBENCH_BROKER", &o.Broker}, {"INBOXBENCH_TOPIC", &o.Topic}, {"INBOXBENCH_GROUP", &o.Group},
				{"INBOXBENCH_SCHEMA", &o.Schema}, {"INBOXBENCH_CONSUMER", &o.Consumer}} {
				if *v.to = os.Getenv(v.name); *v.to == "" {
					return usagef("%s is not set: bench consume runs as a service cell's instance, which the cell starts with its environment (docs/services.md)", v.name)
				}
			}
			shards, err := strconv.Atoi(os.Getenv("INBOXBENCH_SHARDS"))
			if err != nil || shards < 1 {
				return usagef("INBOXBENCH_SHARDS %q: the topic's shard count, a whole number from 1", os.Getenv("INBOXBENCH_SHARDS"))
			}
			o.Shards = shards
			o.Ready = func() {
				fmt.Printf("bench consume ready: %s %s as %s with %s\n", o.Broker, o.Topic, o.Consumer, strategy)
			}
			return runner.Consume(c.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&strategy, "strategy", "tx", "the inbox strategy that applies each delivery (bench inbox strategies)")
	f.IntVar(&consumers, "consumers", 2, "subscriptions this process runs")
	f.IntVar(&batch, "batch-size", 100, "deliveries per transaction for a batching strategy")
	return cmd
}
