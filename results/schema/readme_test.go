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

// TestReadmeDocumentsEveryField holds README.md's "Result files" section
// to the schemas: each object of the schemas has a table ("#### `name`")
// whose rows name exactly its properties, so a field added to the model
// (and, by TestSchemaMatchesModel, to the schema) is documented for the
// users whose tooling reads it.
func TestReadmeDocumentsEveryField(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(b)
	start := strings.Index(section, "\n## Result files")
	if start < 0 {
		t.Fatal(`README.md has no "## Result files" section`)
	}
	section = section[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	tables := map[string]string{}
	for _, part := range strings.Split(section, "\n#### ")[1:] {
		name := strings.Trim(strings.Fields(part)[0], "`")
		tables[name] = part
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
			t.Errorf("README.md, Result files: no table \"#### `%s`\" for the schema object %s", name, name)
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
		if diff := setDiff(want, documented, "the schema", "the README"); diff != "" {
			t.Errorf("README.md table `%s` and the schema differ: %s", name, diff)
		}
	}
	for name := range tables {
		if _, ok := objects[name]; !ok {
			t.Errorf("README.md documents `%s`, which no schema defines", name)
		}
	}
}
