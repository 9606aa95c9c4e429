package inbox

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func pgxpoolNewLazy(cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

func TestResultNames(t *testing.T) {
	for r := Applied; r <= Parked; r++ {
		got, err := ParseResult(r.String())
		if err != nil || got != r {
			t.Fatalf("%v round-trips to %v, %v", r, got, err)
		}
	}
	want := "APPLIED DUPLICATE GAP STALE CONFLICT PARKED"
	var names []string
	for r := Applied; r <= Parked; r++ {
		names = append(names, r.String())
	}
	if strings.Join(names, " ") != want {
		t.Fatalf("names %v, want %s", names, want)
	}
	if _, err := ParseResult("NONE"); err == nil {
		t.Fatal("NONE is not a result")
	}
}

func TestRegistry(t *testing.T) {
	var names []string
	for _, s := range Strategies() {
		names = append(names, s.Name())
		if s.Broken() != strings.HasPrefix(s.Name(), "broken-") {
			t.Errorf("%s: Broken()=%t", s.Name(), s.Broken())
		}
		if s.Description() == "" {
			t.Errorf("%s has no description", s.Name())
		}
	}
	want := "tx cte batch pipeline ext-key ext-lease ext-outbox broken-ack-before-commit broken-aggregate-key broken-broker-dedup broken-check-then-insert broken-ext-after-commit broken-ext-exists broken-ext-new-key broken-global-key broken-no-version broken-split broken-ttl-dedup"
	if strings.Join(names, " ") != want {
		t.Fatalf("Strategies() = %v, want %s", names, want)
	}
	for _, spec := range []string{"all", "*", "correct", " all , tx "} {
		got, err := Resolve(spec)
		if err != nil {
			t.Fatal(err)
		}
		var gn []string
		for _, s := range got {
			gn = append(gn, s.Name())
		}
		if strings.Join(gn, ",") != "tx,cte,batch,pipeline" {
			t.Fatalf("Resolve(%q) = %v: wildcards must expand to the correct strategies only", spec, gn)
		}
	}
	if got, err := Resolve("external"); err != nil || len(got) != 3 || got[0].Name() != "ext-key" || !CallsExternal(got[2]) {
		t.Fatalf("Resolve(external) = %v, %v: want the three correct external strategies", got, err)
	}
	got, err := Resolve("broken-split,tx,broken-split")
	if err != nil || len(got) != 2 || got[0].Name() != "broken-split" {
		t.Fatalf("Resolve by full name: %v %v", got, err)
	}
	for _, bad := range []string{"broken-*", "broken", "", "txx", "b*"} {
		if _, err := Resolve(bad); err == nil {
			t.Errorf("Resolve(%q) accepted", bad)
		}
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "broken-split (broken: negative control)") {
		t.Fatalf("Lookup error must list labelled names: %v", err)
	}
	s, _ := Lookup("broken-ack-before-commit")
	if Label(s) != "broken-ack-before-commit (broken: negative control, consumer-level)" {
		t.Fatalf("label %q", Label(s))
	}
	s, _ = Lookup(DefaultStrategy)
	if s.Broken() {
		t.Fatal("the default strategy is broken")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a duplicate name must panic")
		}
	}()
	Register(s)
}

func TestRegisterRejectsDisguisedControl(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a broken strategy without the broken- prefix must panic")
		}
	}()
	s, err := Lookup("broken-no-version")
	if err != nil {
		t.Fatal(err)
	}
	Register(disguised{s.(brokenNoVersion)})
}

type disguised struct{ brokenNoVersion }

func (disguised) Name() string { return "fast" }

func TestMigrationsEmbedded(t *testing.T) {
	ms := Migrations()
	if len(ms) == 0 || ms[0].Version != 1 || !strings.Contains(ms[0].SQL, "@schema@.inbox") {
		t.Fatalf("migrations %+v", ms)
	}
}
