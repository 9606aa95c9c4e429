package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadErrors(t *testing.T) {
	empty := t.TempDir()
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "neither result.json nor conform.json") {
		t.Errorf("empty dir: got %v", err)
	}
	if _, err := Load(filepath.Join(empty, "missing")); err == nil {
		t.Error("missing dir: no error")
	}
	if _, err := Load(filepath.Join("testdata", "result.json")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file instead of dir: got %v", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "result.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "not a result.json") {
		t.Errorf("broken JSON: got %v", err)
	}
}
