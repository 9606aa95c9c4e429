package schema_test

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/inboxbench/inboxbench/dbcalib"
	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/schema"
	"github.com/inboxbench/inboxbench/workload"
)

const base = schema.Base

// compiled returns the validators for result.json, conform.json and
// calibrate.json.
func compiled(t *testing.T) (result, conform, calibrate *jsonschema.Schema) {
	t.Helper()
	var out [3]*jsonschema.Schema
	for i, name := range []string{schema.Result, schema.Conform, schema.Calibrate} {
		s, err := schema.Compile(name)
		if err != nil {
			t.Fatalf("compile %s: %v", name, err)
		}
		out[i] = s
	}
	return out[0], out[1], out[2]
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := schema.Files.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validate checks JSON bytes against a schema and fails with the
// validator's explanation (which names the offending path).
func validate(t *testing.T, what string, s *jsonschema.Schema, b []byte) {
	t.Helper()
	if err := validateErr(s, b); err != nil {
		t.Errorf("%s does not match its schema:\n%v", what, err)
	}
}

func validateErr(s *jsonschema.Schema, b []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(inst)
}

func TestSchemasDeclareTheModelVersion(t *testing.T) {
	for _, name := range schema.Names {
		var doc struct {
			ID         string `json:"$id"`
			Dialect    string `json:"$schema"`
			Properties struct {
				Version struct {
					Const int `json:"const"`
				} `json:"schema_version"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(read(t, name), &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := results.SchemaVersion
		switch name {
		case schema.Calibrate:
			want = results.CalibrationSchemaVersion
		case schema.CalibrateDB:
			want = dbcalib.SchemaVersion
		}
		if doc.Properties.Version.Const != want {
			t.Errorf("%s: schema_version const %d, the model writes %d: bump the schema with the model (docs/results.md, Versions)",
				name, doc.Properties.Version.Const, want)
		}
		if doc.ID != base+name || doc.Dialect != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $id %q, $schema %q", name, doc.ID, doc.Dialect)
		}
	}
}

// TestTestdataValidates checks the report fixtures: they are what the
// writers' golden tests render, so they must be files bench could write.
func TestTestdataValidates(t *testing.T) {
	result, conform, _ := compiled(t)
	dir := filepath.Join("..", "testdata")
	validate(t, "testdata/result.json", result, mustRead(t, filepath.Join(dir, "result.json")))
	validate(t, "testdata/conform.json", conform, mustRead(t, filepath.Join(dir, "conform.json")))
	validate(t, "testdata/conform-only/conform.json", conform, mustRead(t, filepath.Join(dir, "conform-only", "conform.json")))
}

// TestErroredCellValidates: a cell that did not complete is written with
// the verdict ERROR (runner), which the schema must allow.
func TestErroredCellValidates(t *testing.T) {
	result, _, _ := compiled(t)
	run, err := results.Read(filepath.Join("..", "testdata", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	run.Cells[0].Error, run.Cells[0].Invariants.Verdict = "broker unreachable", results.VerdictError
	p, err := run.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	validate(t, "result.json with an errored cell", result, mustRead(t, p))
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFullyPopulatedModelValidates sets every field of the models (every
// omitempty field included, every map and slice with an entry), writes
// them with the real writers and validates the files: a field the schema
// does not know fails here, because every object is closed.
func TestFullyPopulatedModelValidates(t *testing.T) {
	result, conform, calibrate := compiled(t)
	m := populate(t, loadDocs(t))
	dir := t.TempDir()
	p, err := m.run.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := mustRead(t, p)
	validate(t, "fully populated result.json", result, b)
	p, err = m.conf.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	validate(t, "fully populated conform.json", conform, mustRead(t, p))
	if p, err = m.cal.Write(dir); err != nil {
		t.Fatal(err)
	}
	validate(t, "fully populated calibrate.json", calibrate, mustRead(t, p))
	p = filepath.Join(dir, "calibrate-db.json")
	if err := m.db.WriteJSON(p); err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(schema.CalibrateDB, mustRead(t, p)); err != nil {
		t.Errorf("fully populated calibrate-db.json does not match its schema:\n%v", err)
	}

	// The schema is strict enough to catch a renamed field or a wrong
	// type: each mutation of the valid file must be refused.
	for _, m := range []struct{ old, new string }{
		{`"events_per_s"`, `"eventsPerS"`},
		{`"schema_version": 1`, `"schema_version": 2`},
		{`"verdict": "PASS"`, `"verdict": "OK"`},
		{`"git_commit"`, `"commit"`},
	} {
		if !bytes.Contains(b, []byte(m.old)) {
			t.Fatalf("populated result.json lacks %s", m.old)
		}
		if validateErr(result, bytes.Replace(b, []byte(m.old), []byte(m.new), 1)) == nil {
			t.Errorf("the schema accepts result.json with %s replaced by %s", m.old, m.new)
		}
	}
}

// TestSchemaMatchesModel walks each Go model type and its schema side by
// side: every struct's JSON field names must equal the object's
// properties, its non-omitempty fields must equal "required", and the
// types must agree. A field added, renamed or removed on one side only
// fails here, naming the path.
func TestSchemaMatchesModel(t *testing.T) { populate(t, loadDocs(t)) }

// models are the four files' models.
type models struct {
	run  results.Run
	conf results.Conformance
	cal  results.Calibration
	db   dbcalib.Report
}

// populate sets every field of the four models from their schemas (fill
// fails t where a model and its schema disagree).
func populate(t *testing.T, d docs) *models {
	t.Helper()
	m := &models{}
	fill(t, d, reflect.ValueOf(&m.run).Elem(), d.root(schema.Result), "result.json")
	fill(t, d, reflect.ValueOf(&m.conf).Elem(), d.root(schema.Conform), "conform.json")
	fill(t, d, reflect.ValueOf(&m.cal).Elem(), d.root(schema.Calibrate), "calibrate.json")
	fill(t, d, reflect.ValueOf(&m.db).Elem(), d.root(schema.CalibrateDB), "calibrate-db.json")
	return m
}

// docs are the parsed schema files, for resolving references.
type docs map[string]map[string]any

func loadDocs(t *testing.T) docs {
	t.Helper()
	d := docs{}
	for _, name := range schema.Names {
		var m map[string]any
		if err := json.Unmarshal(read(t, name), &m); err != nil {
			t.Fatal(err)
		}
		d[name] = m
	}
	return d
}

// node is a schema node with the file it lives in (for relative $refs).
type node struct {
	file string
	m    map[string]any
}

func (d docs) root(file string) node { return node{file, d[file]} }

// resolve follows $ref until it reaches a node without one.
func (d docs) resolve(t *testing.T, n node) node {
	for {
		ref, ok := n.m["$ref"].(string)
		if !ok {
			return n
		}
		file, ptr, _ := strings.Cut(ref, "#")
		if file == "" {
			file = n.file
		}
		cur := any(d[file])
		for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			if part == "" {
				continue
			}
			m, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("$ref %s in %s does not resolve", ref, n.file)
			}
			cur = m[part]
		}
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("$ref %s in %s does not resolve", ref, n.file)
		}
		n = node{file, m}
	}
}

func (n node) child(key string) (node, bool) {
	m, ok := n.m[key].(map[string]any)
	return node{n.file, m}, ok
}

// types is the node's "type" keyword as a list.
func (n node) types() []string {
	switch v := n.m["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

var (
	timeType     = reflect.TypeOf(time.Time{})
	rawType      = reflect.TypeOf(json.RawMessage{})
	textMarshal  = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	fixedTime    = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	workloadType = reflect.TypeOf(workload.Spec{})
)

// fill checks v's type against the schema node and sets v to a value with
// every field populated, choosing values the schema allows (the first
// enum value, the const, a duration string).
func fill(t *testing.T, d docs, v reflect.Value, n node, path string) {
	t.Helper()
	n = d.resolve(t, n)
	typ := v.Type()
	switch {
	case typ == timeType:
		expectType(t, n, path, "string")
		v.Set(reflect.ValueOf(fixedTime))
		return
	case typ == rawType:
		// result.json embeds the resolved workload spec as raw JSON.
		var spec workload.Spec
		fill(t, d, reflect.ValueOf(&spec).Elem(), n, path)
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		v.SetBytes(b)
		return
	case typ.Implements(textMarshal) && typ.Kind() != reflect.Struct:
		expectType(t, n, path, "string")
		v.SetInt(int64(1500 * time.Millisecond)) // workload.Duration, written "1.5s"
		return
	}
	switch typ.Kind() {
	case reflect.Struct:
		fillStruct(t, d, v, n, path)
	case reflect.Pointer:
		v.Set(reflect.New(typ.Elem()))
		fill(t, d, v.Elem(), n, path)
	case reflect.Slice:
		expectType(t, n, path, "array")
		items, ok := n.child("items")
		if !ok {
			t.Errorf("%s: array schema without items", path)
			return
		}
		if strings.Count(path, ".rounds") > 1 {
			// A cell's rounds are cells: one level of them is the whole
			// shape, and the type is recursive.
			return
		}
		s := reflect.MakeSlice(typ, 1, 1)
		fill(t, d, s.Index(0), items, path+"[]")
		v.Set(s)
	case reflect.Map:
		expectType(t, n, path, "object")
		vals, ok := n.child("additionalProperties")
		if !ok {
			t.Errorf("%s: map without an additionalProperties schema for its values", path)
			return
		}
		m := reflect.MakeMap(typ)
		e := reflect.New(typ.Elem()).Elem()
		fill(t, d, e, vals, path+".*")
		m.SetMapIndex(reflect.ValueOf("k").Convert(typ.Key()), e)
		v.Set(m)
	case reflect.String:
		v.SetString(stringFor(t, n, path))
	case reflect.Int, reflect.Int64:
		expectType(t, n, path, "integer")
		if c, ok := n.m["const"].(float64); ok {
			v.SetInt(int64(c))
		} else {
			v.SetInt(1)
		}
	case reflect.Float64:
		expectType(t, n, path, "number")
		v.SetFloat(0.5)
	case reflect.Bool:
		expectType(t, n, path, "boolean")
		v.SetBool(true)
	default:
		t.Errorf("%s: Go kind %s has no schema mapping in this test", path, typ.Kind())
	}
}

// fillStruct compares the struct's JSON fields with the object's
// properties and required list, then fills each field.
func fillStruct(t *testing.T, d docs, v reflect.Value, n node, path string) {
	t.Helper()
	expectType(t, n, path, "object")
	if ap, ok := n.m["additionalProperties"].(bool); !ok || ap {
		t.Errorf("%s: the model is a closed struct: its schema needs \"additionalProperties\": false", path)
	}
	props, _ := n.child("properties")
	var fields, required []string
	byName := map[string]int{}
	typ := v.Type()
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		byName[name] = i
		if o := strings.Split(opts, ","); !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero") {
			required = append(required, name)
		}
	}
	var schemaProps []string
	for k := range props.m {
		schemaProps = append(schemaProps, k)
	}
	var schemaReq []string
	if r, ok := n.m["required"].([]any); ok {
		for _, x := range r {
			schemaReq = append(schemaReq, x.(string))
		}
	}
	if diff := setDiff(fields, schemaProps, "Go", "the schema"); diff != "" {
		t.Errorf("%s (%s): Go fields and schema properties differ: %s", path, typ, diff)
	}
	if diff := setDiff(required, schemaReq, "Go", "the schema"); diff != "" {
		t.Errorf("%s (%s): fields without omitempty must be exactly the schema's required list: %s", path, typ, diff)
	}
	for _, name := range fields {
		pn, ok := props.child(name)
		if !ok {
			continue // reported above
		}
		fill(t, d, v.Field(byName[name]), pn, path+"."+name)
	}
}

func stringFor(t *testing.T, n node, path string) string {
	if c, ok := n.m["const"].(string); ok {
		return c
	}
	if e, ok := n.m["enum"].([]any); ok {
		for _, x := range e {
			if s, ok := x.(string); ok && s != "" {
				return s
			}
		}
	}
	expectType(t, n, path, "string")
	return "x"
}

func expectType(t *testing.T, n node, path, want string) {
	t.Helper()
	if _, ok := n.m["enum"]; ok && want == "string" {
		return
	}
	if !slices.Contains(n.types(), want) {
		t.Errorf("%s: the model has a %s here, the schema says type %v", path, want, n.types())
	}
}

// setDiff describes what is only in a and only in b ("" when equal).
func setDiff(a, b []string, aName, bName string) string {
	var onlyA, onlyB []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			onlyA = append(onlyA, x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			onlyB = append(onlyB, x)
		}
	}
	sort.Strings(onlyA)
	sort.Strings(onlyB)
	if len(onlyA) == 0 && len(onlyB) == 0 {
		return ""
	}
	return fmt.Sprintf("only in %s: %v; only in %s: %v", aName, onlyA, bName, onlyB)
}
