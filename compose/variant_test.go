package compose

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/inboxbench/inboxbench/config"
)

// fakeVariantService is a service of a variant that exists only in this
// test: its endpoints come from a file its stack would write.
type fakeVariantService struct{ name string }

func (f fakeVariantService) Name() string                              { return f.name }
func (fakeVariantService) Addr(*Env) string                            { return "127.0.0.1:1" }
func (fakeVariantService) Install(context.Context, *Env) error         { return nil }
func (fakeVariantService) Start(context.Context, *Env) error           { return nil }
func (fakeVariantService) Ready(context.Context, *Env) (string, error) { return "", errors.New("no") }
func (fakeVariantService) Procs(*Env) []Proc                           { return nil }
func (fakeVariantService) Logs(*Env) []string                          { return nil }
func (f fakeVariantService) Endpoints(e *Env) (map[string]string, error) {
	b, err := os.ReadFile(e.Path("password"))
	if err != nil {
		return nil, err
	}
	return map[string]string{"postgres.url": "postgres://u:" + string(b) + "@127.0.0.1:2/x"}, nil
}

// TestVariantEndpoints: a variant's services live in their own
// directory, its endpoints replace the settings the user did not give,
// and before its stack wrote what they need the error says to start it.
func TestVariantEndpoints(t *testing.T) {
	registerIn(VariantSecure, 99, fakeVariantService{"fake"})
	defer delete(registry[VariantSecure], 99)
	dir := t.TempDir()
	cfg := config.Default().With("stack.dir", dir).With(SettingSecure, "true")
	if _, err := ApplyVariant(cfg); err == nil || !errors.Is(err, ErrUsage) {
		t.Fatalf("ApplyVariant before the stack wrote its files: %v, want a usage error", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, VariantSecure), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, VariantSecure, "password"), []byte("pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ApplyVariant(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.PGURL != "postgres://u:pw@127.0.0.1:2/x" {
		t.Errorf("PGURL = %q, want the variant's", got.PGURL)
	}
	if plain, _ := ApplyVariant(config.Default()); plain.PGURL != config.DefaultPGURL {
		t.Errorf("the plain stack's PGURL changed: %q", plain.PGURL)
	}
	e, err := NewEnv(cfg, nil)
	if err != nil || e.Path("x") != filepath.Join(dir, VariantSecure, "x") || e.SharedPath("m2") != filepath.Join(dir, "m2") {
		t.Errorf("NewEnv: %v; Path %q SharedPath %q", err, e.Path("x"), e.SharedPath("m2"))
	}
	if _, err := Select(VariantSecure, []string{"postgres"}); err == nil {
		t.Error("Select found a plain service in the secure stack")
	}
}
