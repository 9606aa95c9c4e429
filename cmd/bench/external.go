package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/external"
)

func newExternalCmd(*config.Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "external",
		Short: "The external service strategies call beyond the database (a payment-provider stand-in)",
	}
	var listen string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the external service until interrupted, for runs whose consumers run on other machines",
		Long: `Serves the payment-provider stand-in that the external strategies (ext-*,
broken-ext-*, strategy files with an external step) call: idempotency keys
with stored results, a result query by key, a call log the checker reads
after each cell, and the fault knobs of the workload's fault plan (a delay
per call, an answer held until the caller gave up, a window in which every
call is refused). Each cell works in a namespace of its own.

'bench run' and 'bench conform' start one inside their own process on a
loopback port when a strategy needs it, and the 'bench worker' processes
they start reach it there. Workers on other machines cannot: serve it on an
address they reach and pass that to 'bench run --external-url'.`,
		Example: `  bench external serve --listen 0.0.0.0:58090
  bench run --brokers kafka --workload external --remote-workers 2 --external-url http://coordinator:58090`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return external.Serve(c.Context(), listen, func(url string) {
				fmt.Fprintf(os.Stderr, "external service listening at %s (interrupt to stop)\n", url)
			})
		},
	}
	serve.Flags().StringVar(&listen, "listen", "127.0.0.1:58090", "address to listen on (host:port; port 0 picks a free one)")
	cmd.AddCommand(serve)
	return cmd
}
