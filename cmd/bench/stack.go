package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

func newStackCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stack",
		Short: "Run the local stack: PostgreSQL, RabbitMQ, Kafka, RocketMQ, NATS and Redis on loopback",
		Long: `Runs the services natively, without Docker, on fixed loopback ports:

  postgres   127.0.0.1:55432   Debian package, cluster in <stack-dir>/pg
  rabbitmq   127.0.0.1:55672   Debian package, its own node in <stack-dir>/rabbitmq
  kafka      127.0.0.1:59092   Maven Central artifacts, KRaft single node (controller 59093)
  rocketmq   127.0.0.1:59876   Maven Central artifacts, name server + broker (50911)
  nats       127.0.0.1:54222   nats-server built with go install, JetStream in <stack-dir>/nats
  redis      127.0.0.1:56379   Debian package, its own server in <stack-dir>/redis

Missing Debian packages are installed with apt-get when running as root;
otherwise the command prints what to install and exits 2. Users with Docker
can run compose/docker-compose.yml instead: it publishes the same ports, so
every other command works against either.

SERVICE arguments restrict a command to some services (default: all).

Beside this plain stack, variants run on their own loopback ports and
directories (<stack-dir>/<variant>), so both can run at once; the global
flag that selects one also points every other command's endpoints at it
(a setting given by flag or INBOXBENCH_* variable still wins):
  --topology replicated   several nodes per service, for failover
  --secure                TLS and authentication on every service: postgres
                          57432, rabbitmq 57671 (AMQPS), kafka 57092 (SASL_SSL),
                          rocketmq 57876 (broker 57911); CA, certificates and
                          passwords in <stack-dir>/secure (docs/stack.md)`,
	}
	r := stackResolver{cfg}
	cmd.AddCommand(newStackUpCmd(r), newStackDownCmd(r), newStackStatusCmd(r), newStackLogsCmd(r))
	return cmd
}

// stackResolver turns SERVICE arguments into services and the stack's Env.
type stackResolver struct{ cfg *config.Config }

// runE is a stack command's RunE: it resolves the SERVICE arguments
// (a usage error when they name none of the stack's) and runs fn on them.
func (r stackResolver) runE(fn func(c *cobra.Command, e *compose.Env, svcs []compose.Service) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		e, err := compose.NewEnv(*r.cfg, os.Stdout)
		if err != nil {
			return usageError{err}
		}
		svcs, err := compose.Select(e.Variant, args)
		if err != nil {
			return usageError{err}
		}
		return fn(c, e, svcs)
	}
}

func newStackUpCmd(r stackResolver) *cobra.Command {
	var durability string
	up := &cobra.Command{
		Use:   "up [SERVICE...]",
		Short: "Install what is missing, start the services and wait until each answers its protocol",
		Long: `Installs missing Debian packages and Maven artifacts, starts every service
that is not already healthy, and waits for protocol-level readiness: a SQL
query, an AMQP channel, a Kafka metadata request, a RocketMQ route query.
A healthy service is reused, so running it twice is harmless. On failure it
names the service, the command it ran and the log file to read.

--durability chooses what a confirm and a commit mean:
  stock   each server as it ships (default): Kafka and RocketMQ confirm from
          the page cache, RabbitMQ quorum queues and PostgreSQL fsync first
  fsync   every server fsyncs before it confirms: Kafka
          log.flush.interval.messages=1, RocketMQ SYNC_FLUSH, RabbitMQ quorum
          queues, PostgreSQL synchronous_commit=on
  os      none waits for the disk where it can: Kafka and RocketMQ as stock,
          PostgreSQL synchronous_commit=off (fsync stays on); RabbitMQ quorum
          queues always fsync
Without the flag each service keeps the profile it was started with. A
running service whose settings differ under the new profile is restarted.`,
		ValidArgs: compose.Names(compose.VariantPlain),
		RunE: r.runE(func(c *cobra.Command, e *compose.Env, svcs []compose.Service) error {
			if err := compose.CheckDurability(durability); err != nil {
				return usageError{err}
			}
			e.Durability = durability
			if err := compose.Up(c.Context(), e, svcs); err != nil {
				return err
			}
			warnDisk(r.cfg)
			return nil
		}),
	}
	up.Flags().StringVar(&durability, "durability", "", "durability profile: stock, fsync or os (default: keep each service's; stock for a new one)")
	return up
}

func newStackDownCmd(r stackResolver) *cobra.Command {
	var wipe bool
	down := &cobra.Command{
		Use:   "down [SERVICE...]",
		Short: "Stop the services that 'up' started (data is kept unless --wipe)",
		RunE: r.runE(func(c *cobra.Command, e *compose.Env, svcs []compose.Service) error {
			return compose.Down(c.Context(), e, svcs, wipe)
		}),
	}
	down.Flags().BoolVar(&wipe, "wipe", false, "also delete the services' data directories")
	return down
}

func newStackStatusCmd(r stackResolver) *cobra.Command {
	return &cobra.Command{
		Use:   "status [SERVICE...]",
		Short: "Check each service once and print service, version, address and health",
		Long: `Checks each service with the same protocol-level query 'up' waits for, at the
configured address (so it also works against compose or remote clusters).
Then it lists, per service, the TCP addresses it listens on (read from
/proc/net/tcp and tcp6: the sockets of the processes the stack started and
of the service's known ports). Exits 1 when any selected service is
unhealthy or listens beyond loopback, except for the one documented case
(RocketMQ's HA port; see docs/stack.md).`,
		RunE: r.runE(func(c *cobra.Command, e *compose.Env, svcs []compose.Service) error {
			rows := compose.Status(c.Context(), e, svcs)
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVICE\tVERSION\tADDRESS\tHEALTHY\tDURABILITY\tDETAIL")
			bad, refused := 0, 0
			for _, r := range rows {
				h, detail := "yes", r.Detail
				switch {
				case r.Refused():
					h, refused, detail = "REFUSED", refused+1, describe(r.Err)
				case !r.Healthy:
					h, bad = "NO", bad+1
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Service, dash(r.Version), r.Address, h, dash(r.Durability), detail)
			}
			tw.Flush()
			if c.Flags().NArg() == 0 { // every service: the whole stack's profile
				fmt.Printf("durability profile: %s\n", compose.StackDurability(e))
			}
			badNodes := printNodes(rows)
			exposed := printListening(rows)
			if refused > 0 {
				return usagef("%d of %d services refused the configured settings (TLS, credentials or permissions: DETAIL says which setting); starting them would not change that", refused, len(rows))
			}
			if bad > 0 || badNodes > 0 {
				return failure{fmt.Sprintf("%d of %d services unhealthy, %d nodes unhealthy: start them with 'bench stack up%s'", bad, len(rows), badNodes, compose.VariantFlag(e.Variant))}
			}
			if len(exposed) > 0 {
				return failure{fmt.Sprintf("listening beyond loopback: %s: the native stack binds its ports to loopback (RocketMQ's HA port aside); restart the service with 'bench stack down NAME && bench stack up NAME' (stacks started by an older bench bound RabbitMQ's 55673 to every interface), and if it stays, something else listens on that port", strings.Join(exposed, ", "))}
			}
			return nil
		}),
	}
}

func newStackLogsCmd(r stackResolver) *cobra.Command {
	var lines int
	logs := &cobra.Command{
		Use:   "logs SERVICE",
		Short: "Print the tail of a service's log files",
		Args:  cobra.ExactArgs(1),
		RunE: r.runE(func(c *cobra.Command, e *compose.Env, svcs []compose.Service) error {
			for _, l := range svcs[0].Logs(e) {
				fmt.Printf("==> %s <==\n", l)
				t := exec.CommandContext(c.Context(), "tail", "-n", fmt.Sprint(lines), l)
				t.Stdout, t.Stderr = os.Stdout, os.Stderr
				_ = t.Run()
			}
			return nil
		}),
	}
	logs.Flags().IntVarP(&lines, "lines", "n", 50, "number of lines per log file")
	return logs
}

// printNodes prints the nodes of the replicated services, with their role
// and health, and returns how many are unhealthy.
func printNodes(rows []compose.StatusRow) (bad int) {
	var any bool
	for _, r := range rows {
		any = any || len(r.Nodes) > 0
	}
	if !any {
		return 0
	}
	fmt.Println("\nNODES")
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tNODE\tADDRESS\tROLE\tHEALTHY\tDETAIL")
	for _, r := range rows {
		for _, n := range r.Nodes {
			h := "yes"
			if !n.Healthy {
				h, bad = "NO", bad+1
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Service, n.Name, n.Addr, dash(n.Role), h, n.Detail)
		}
	}
	tw.Flush()
	return bad
}

// printListening prints each service's listening addresses and returns the
// ones beyond loopback that no documented reason allows.
func printListening(rows []compose.StatusRow) (exposed []string) {
	fmt.Println("\nLISTENING (TCP, this host)")
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		var addrs []string
		for _, l := range r.Listening {
			a := l.String()
			switch {
			case l.Allowed != "":
				a += " (all interfaces: " + l.Allowed + ")"
			case !l.Loopback():
				a += " (NOT LOOPBACK)"
				exposed = append(exposed, r.Service+" "+l.String())
			}
			addrs = append(addrs, a)
		}
		switch {
		case r.ListenErr != nil:
			addrs = []string{"unknown: " + r.ListenErr.Error()}
		case len(addrs) == 0:
			addrs = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\n", r.Service, strings.Join(addrs, "  "))
	}
	tw.Flush()
	return exposed
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
