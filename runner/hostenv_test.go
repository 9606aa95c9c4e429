package runner

import (
	"strings"
	"testing"
)

func TestAutogroupNote(t *testing.T) {
	if n := autogroupNote("1\n"); !strings.Contains(n, "sched_autogroup_enabled=1") || !strings.Contains(n, "PostgreSQL backend") {
		t.Errorf("autogroup on: want a note naming the setting and PostgreSQL's backends, got %q", n)
	}
	for _, off := range []string{"0\n", "", "garbage"} {
		if n := autogroupNote(off); n != "" {
			t.Errorf("autogroup %q: want no note, got %q", off, n)
		}
	}
}
