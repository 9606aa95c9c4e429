package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/inboxbench/inboxbench/inbox"
)

// strategyFileHelp is the --strategy-file flag's help, shared by the
// commands that take it.
const strategyFileHelp = "a user strategy SQL file to run beside the built-in strategies (repeatable); its cells are named file:NAME.sql@HASH. Format: examples/strategies/README.md"

// loadStrategyFiles reads each --strategy-file. A bad file is a usage
// error (exit 2) naming the file, statement and parameter; it never falls
// back to a built-in strategy. What a file that loads should still fix is
// printed to stderr as a warning.
func loadStrategyFiles(paths []string) ([]inbox.Strategy, error) {
	var out []inbox.Strategy
	for _, p := range paths {
		s, err := inbox.LoadStrategyFile(p)
		if err != nil {
			return nil, usagef("--strategy-file: %v", err)
		}
		for _, w := range s.Warnings() {
			fmt.Fprintln(os.Stderr, "bench: warning: --strategy-file:", w)
		}
		out = append(out, s)
	}
	return out, nil
}

// strategyFileErr turns a run's refusal of a strategy file (SQL the server
// rejects, a workload it cannot run) into a usage error: the run stopped
// before publishing anything.
func strategyFileErr(err error) error {
	if errors.Is(err, inbox.ErrStrategyFile) {
		return usagef("--strategy-file: %v", err)
	}
	return err
}
