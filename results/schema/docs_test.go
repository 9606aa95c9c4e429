package schema_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/results/schema"
)

// TestDocsDocumentEveryField holds docs/results.md and
// docs/results-calibration.md, the reference of the result files, to the
// schemas: each object of the schemas has a table (a heading "### `name`"
// and the table under it) whose rows name exactly its properties, so a
// field added to the model (and, by TestSchemaMatchesModel, to the schema)
// is documented for the users whose tooling reads it.
func TestDocsDocumentEveryField(t *testing.T) {
	const doc = "docs/results.md and docs/results-calibration.md"
	tables := map[string]string{}
	heading := regexp.MustCompile("(?m)^### `([^`]+)`[^\n]*\n")
	for _, f := range []string{"docs/results.md", "docs/results-calibration.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, l := range heading.FindAllStringSubmatchIndex(text, -1) {
			table := text[l[1]:] // up to the next heading
			if next := strings.Index(table, "\n#"); next >= 0 {
				table = table[:next]
			}
			if _, dup := tables[text[l[2]:l[3]]]; dup {
				t.Errorf("%s: `%s` has two tables", doc, text[l[2]:l[3]])
			}
			tables[text[l[2]:l[3]]] = table
		}
	}
	if len(tables) == 0 {
		t.Fatalf("%s have no tables under \"### `name`\" headings", doc)
	}
	d := loadDocs(t)
	objects := map[string]node{"result.json": d.root(schema.Result), "conform.json": d.root(schema.Conform),
		"calibrate.json": d.root(schema.Calibrate), "calibrate-db.json": d.root(schema.CalibrateDB)}
	for _, file := range schema.Names {
		defs, _ := d[file]["$defs"].(map[string]any)
		for name, def := range defs {
			if m, ok := def.(map[string]any); ok && m["properties"] != nil {
				objects[name] = node{file, m}
			}
		}
	}
	row := regexp.MustCompile("(?m)^\\| ([^|]+) \\|")
	field := regexp.MustCompile("`([a-z0-9_]+)`")
	for name, n := range objects {
		table, ok := tables[name]
		if !ok {
			t.Errorf("%s: no table \"### `%s`\" for the schema object %s", doc, name, name)
			continue
		}
		var documented []string
		for _, m := range row.FindAllStringSubmatch(table, -1) {
			for _, f := range field.FindAllStringSubmatch(m[1], -1) {
				documented = append(documented, f[1])
			}
		}
		props, _ := n.child("properties")
		var want []string
		for p := range props.m {
			want = append(want, p)
		}
		sort.Strings(want)
		if diff := setDiff(want, documented, "the schema", doc); diff != "" {
			t.Errorf("%s: table `%s` and the schema differ: %s", doc, name, diff)
		}
	}
	for name := range tables {
		if _, ok := objects[name]; !ok {
			t.Errorf("%s documents `%s`, which no schema defines", doc, name)
		}
	}
}
