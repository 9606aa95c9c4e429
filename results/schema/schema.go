// Package schema ships the JSON Schemas (draft 2020-12) of the files
// inboxbench writes: result.schema.json for result.json (`bench run`) and
// conform.schema.json for conform.json (`bench conform`). Users' tooling
// validates against them; `bench publish` copies them into every site.
//
// The schemas follow the Go model in results/model.go and
// results/conform.go field for field, and the tests in this directory keep
// them in step: a field added to, renamed in or removed from a model
// struct (or from workload.Spec, which result.json embeds) fails
// TestSchemaMatchesModel until the schema and the README's "Result files"
// section say the same. How to change them: README.md, section "Result
// files".
package schema

import "embed"

// Files holds the schemas by file name.
//
//go:embed *.schema.json
var Files embed.FS

// File names inside Files, also used for the copies a published site holds.
const (
	Result  = "result.schema.json"
	Conform = "conform.schema.json"
)
