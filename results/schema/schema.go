// Package schema ships the JSON Schemas (draft 2020-12) of the files
// inboxbench writes: result.schema.json for result.json (`bench run`),
// conform.schema.json for conform.json (`bench conform`) and
// calibrate.schema.json for calibrate.json (`bench calibrate`) and
// calibrate-db.schema.json for the report of `bench calibrate-db --json`.
// Users' tooling
// validates against them; `bench publish` copies them into every site.
//
// The schemas follow the Go model in results/model.go, results/conform.go,
// results/calibrate.go and dbcalib/report.go field for field, and the tests in this directory keep
// them in step: a field added to, renamed in or removed from a model
// struct (or from workload.Spec, which result.json embeds) fails
// TestSchemaMatchesModel until the schema says the same, and
// TestDocsDocumentEveryField until docs/results.md does. How to change
// them: docs/results.md, "Changing the model".
package schema

import (
	"bytes"
	"embed"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Files holds the schemas by file name.
//
//go:embed *.schema.json
var Files embed.FS

// File names inside Files, also used for the copies a published site holds.
const (
	Result  = "result.schema.json"
	Conform = "conform.schema.json"
)

// Calibrate is calibrate.json's schema (`bench calibrate`).
const Calibrate = "calibrate.schema.json"

// CalibrateDB is the schema of `bench calibrate-db --json`'s report
// (dbcalib.Report).
const CalibrateDB = "calibrate-db.schema.json"

// Names lists the schema files.
var Names = []string{Result, Conform, Calibrate, CalibrateDB}

// Base is the URL the schemas' $id values share; cross-file references
// (conform → result) resolve against it.
const Base = "https://github.com/inboxbench/inboxbench/results/schema/"

// Compile returns the validator of one schema (a name from Names), with
// formats (date-time) asserted, not only annotated.
func Compile(name string) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, n := range Names {
		b, err := Files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		if err := c.AddResource(Base+n, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
	}
	return c.Compile(Base + name)
}

// Validate checks a JSON document against one schema; the error names the
// offending path.
func Validate(name string, doc []byte) error {
	s, err := Compile(name)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(inst)
}
