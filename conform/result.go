package conform

import (
	"time"

	"github.com/inboxbench/inboxbench/config"

	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
)

// RunInfo is what conform.json says of its run besides the rows.
type RunInfo struct {
	ID      string
	Started time.Time
	// Servers are the server versions: "postgres" and each broker →
	// version.
	Servers map[string]string
	// Args are the command's arguments (secrets redacted in the file);
	// Notes go into the environment's notes.
	Args, Notes []string
}

// Result is the conform.json of one conformance run: its rows, their
// summary and where they ran (machine, build, server versions). bench
// conform writes it; the schema test in results/schema validates what it
// returns, so the command's file and the tested file come from the same
// code.
func Result(run RunInfo, rows []results.ConformRow) *results.Conformance {
	env := runner.HostEnv(run.Servers)
	env.CommandArg, env.Notes = config.RedactArgs(run.Args), append(env.Notes, run.Notes...)
	return &results.Conformance{SchemaVersion: results.SchemaVersion, RunID: run.ID, StartedAt: run.Started,
		FinishedAt: time.Now().UTC(), Env: env, Rows: rows, Summary: results.Summarize(rows)}
}
