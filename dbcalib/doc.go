// Package dbcalib calibrates the database path of a benchmark: it measures
// what the harness itself costs on the way to PostgreSQL, by two
// side-by-side comparisons run in one process, interleaved, several rounds:
//
//   - pgbench: a `bench run --brokers none` cell of a built-in strategy
//     against pgbench running that strategy's twin (twin.go): the same
//     statements, read from inbox.Statement, in the same transactions and
//     round trips, with clients = the workload's consumers, the same
//     aggregates, fresh event ids, and the same audit on both sides (none by
//     default). The gap is the harness: the none driver, the handler, the
//     envelope, pgx, histograms.
//   - audit: the same none cell with the checker's audit log and without.
//
// Ratios, not absolute rates, are the result: on a shared machine only
// figures measured side by side mean anything. Each comparison reports its
// median ratio over the rounds with its range, against a goal (Goals).
package dbcalib
