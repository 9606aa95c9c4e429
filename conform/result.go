package conform

import (
	"time"

	"github.com/inboxbench/inboxbench/config"

	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/runner"
)

// Result is the conform.json of one conformance run: its rows, their
// summary and where they ran (machine, build, server versions as servers
// maps them: "postgres" and each broker → version). bench conform writes
// it; the schema test in results/schema validates what it returns, so the
// command's file and the tested file come from the same code.
func Result(runID string, started time.Time, rows []results.ConformRow, servers map[string]string, args, notes []string) *results.Conformance {
	env := runner.HostEnv(servers)
	env.CommandArg, env.Notes = config.RedactArgs(args), append(env.Notes, notes...)
	return &results.Conformance{SchemaVersion: results.SchemaVersion, RunID: runID, StartedAt: started,
		FinishedAt: time.Now().UTC(), Env: env, Rows: rows, Summary: results.Summarize(rows)}
}
