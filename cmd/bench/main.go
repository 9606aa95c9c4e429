// Command bench is the inboxbench CLI: it turns flags into library calls.
// Exit codes: 0 ok, 1 a verdict or regression failure, 2 bad usage or
// configuration (the message names the flag or field and what is accepted:
// library errors name settings by key, and settings.go names them by flag).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	_ "github.com/inboxbench/inboxbench/brokers/all" // every broker driver registers itself
	_ "github.com/inboxbench/inboxbench/compose/all" // every stack service: postgres, rabbitmq, kafka, rocketmq

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
)

// usageError marks a problem the user fixes by changing the command line or
// configuration; it exits 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// failure marks a verdict/regression failure already reported; it exits 1.
type failure struct{ msg string }

func (f failure) Error() string { return f.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr))
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	tuneGC()
	cfg, cfgErr := config.FromEnv()
	root := newRoot(&cfg)
	root.SetArgs(args)
	if cfgErr != nil {
		fmt.Fprintln(stderr, "bench: configuration:", describe(cfgErr))
		return 2
	}
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "bench:", describe(err))
	var u usageError
	var se *config.SettingError
	var f failure
	switch {
	case errors.As(err, &u), errors.As(err, &se), errors.Is(err, compose.ErrUsage):
		return 2
	case errors.As(err, &f):
		return 1
	case isCobraUsage(err):
		fmt.Fprintln(stderr, "Run 'bench --help' for usage.")
		return 2
	}
	return 1
}

func newRoot(cfg *config.Config) *cobra.Command {
	root := &cobra.Command{
		Use:   "bench",
		Short: "inboxbench: exactly-once-effect benchmark and conformance suite for message brokers into a PostgreSQL inbox",
		Long: `inboxbench drives identical, deterministic workloads through RabbitMQ, Kafka and
RocketMQ into one PostgreSQL inbox, measures throughput, dedup latency,
end-to-end latency and lock contention, and then proves that every business
event took effect exactly once.

Start with:
  bench stack up                     start PostgreSQL, RabbitMQ, Kafka and RocketMQ locally
  bench stack status                 show what is running, with versions
  bench run --workload smoke         a few seconds through every broker, measured and checked
  bench report results/RUN_ID        report.md and a self-contained report.html with charts
  bench conform --list               the scenarios that judge a broker + inbox setup

Endpoints default to the local stack; point them at your own clusters with
flags or these environment variables:
` + config.EnvHelp(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	cfg.BindFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef("%v (see '%s --help')", err, c.CommandPath())
	})
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		// --topology/--secure: the endpoints of that local stack, under
		// what the user set. `bench stack` starts the variant (and says
		// what is wrong with the choice), so it needs none of them yet.
		applied, err := compose.ApplyVariant(*cfg)
		if err != nil && !under(c, "stack") {
			return usageError{err}
		}
		// After the variant: settings are checked together as the
		// command will use them (a CA file the secure stack names must
		// exist, a key pair must be whole). Before the variant's first
		// start (a stack command) its files do not exist yet: what the
		// user gave is checked.
		check := applied
		if err != nil {
			check = *cfg
		}
		if err := check.Validate(); err != nil {
			return usageError{err}
		}
		// Whole, or (stack commands, before the variant's first start)
		// its addresses at least.
		*cfg = applied
		return nil
	}
	root.AddCommand(newStackCmd(cfg), newInboxCmd(cfg), newRunCmd(cfg), newConformCmd(cfg), newReportCmd(cfg), newCompareCmd(cfg), newPublishCmd(cfg), newWorkerCmd(cfg), newConsumeCmd(cfg), newCalibrateCmd(cfg), newCalibrateDBCmd(cfg), newExternalCmd(cfg))
	for _, c := range root.Commands() {
		groupOnly(c)
	}
	return root
}

// under reports whether c is the top-level command name or one of its
// subcommands.
func under(c *cobra.Command, name string) bool {
	for ; c != nil && c.HasParent(); c = c.Parent() {
		if c.Name() == name && !c.Parent().HasParent() {
			return true
		}
	}
	return false
}

// groupOnly makes a command that only groups subcommands print its help
// when called bare, and reject an unknown subcommand with exit code 2
// (cobra would print the help and exit 0).
func groupOnly(c *cobra.Command) {
	if !c.HasSubCommands() || c.RunE != nil || c.Run != nil {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q: choose one of %s", args[0], c.CommandPath(), subNames(c))
		}
		return c.Help()
	}
}

func subNames(c *cobra.Command) string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return strings.Join(names, ", ")
}

// isCobraUsage recognises cobra's own argument errors (unknown command,
// wrong number of arguments), which carry no type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires exactly", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
