package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/inbox/strategyfile"
)

// strategyFileHelp is the --strategy-file flag's help, shared by the
// commands that take it.
const strategyFileHelp = "a user strategy SQL file to run beside the built-in strategies (repeatable); its cells are named file:NAME.sql@HASH, or LABEL with LABEL=PATH (e.g. base=old.sql new=new.sql: an A/B comparison in one run, see 'bench compare --labels'). Format: examples/strategies/README.md"

// loadStrategyFiles reads each --strategy-file. A bad file is a usage
// error (exit 2) naming the file, statement and parameter; it never falls
// back to a built-in strategy. What a file that loads should still fix is
// printed to stderr as a warning.
func loadStrategyFiles(paths []string) ([]inbox.Strategy, error) {
	var out []inbox.Strategy
	for _, p := range paths {
		label, path := splitLabel(p)
		s, err := inbox.LoadStrategyFile(path)
		if err == nil && label != "" {
			s, err = s.Labelled(label)
		}
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

// splitLabel reads LABEL=PATH; a path with no '=' before its first '/'
// (or with none at all) has no label.
func splitLabel(arg string) (label, path string) {
	l, p, ok := strings.Cut(arg, "=")
	if !ok || strings.ContainsAny(l, "/\\") || l == "" {
		return "", arg
	}
	return l, p
}

// strategyFileErr turns a run's refusal of a strategy file (SQL the server
// rejects, a workload it cannot run) into a usage error: the run stopped
// before publishing anything.
func strategyFileErr(err error) error {
	if errors.Is(err, strategyfile.ErrInvalid) {
		return usagef("--strategy-file: %v", err)
	}
	return err
}
