package results

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// One way to write and read the JSON files bench writes (result.json,
// conform.json, calibrate.json, calibrate-db's --json report), so they
// share one layout and one wording of a read error.

// ResultFile is the file `bench run` writes into a run directory.
const ResultFile = "result.json"

// WriteJSON writes v to path as indented JSON (two spaces, a final
// newline), mode 0644.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON reads path into v. A file that is not JSON of v's shape is an
// error naming the file and what it should have been (what, e.g.
// "result.json"); a missing one is os.ReadFile's error (fs.ErrNotExist).
func ReadJSON(path, what string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: not a %s: %w", path, what, err)
	}
	return nil
}

// writeRunFile stores v as dir/name, creating dir, and returns the path.
func writeRunFile(dir, name string, v any) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	return p, WriteJSON(p, v)
}

// readRunFile reads name from a run directory (or path itself when it is
// a file) into v, and refuses a schema_version (*version once read) other
// than want.
func readRunFile(path, name string, v any, version *int, want int) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, name)
	}
	if err := ReadJSON(path, name, v); err != nil {
		return err
	}
	if *version != want {
		return fmt.Errorf("%s: schema_version %d, this bench reads %d", path, *version, want)
	}
	return nil
}
