package compose

import (
	"strings"
	"testing"
)

func TestDiskNote(t *testing.T) {
	const gb = 1 << 30
	for _, c := range []struct {
		total, avail uint64
		warn         bool
	}{
		{252 * gb, 54 * gb, false}, // 79% used, room for a make bench
		{252 * gb, 12 * gb, true},  // the disk that starved RocketMQ
		{100 * gb, 25 * gb, false}, // 75% used, 25 GB
		{100 * gb, 19 * gb, true},  // 81% used
		{30 * gb, 15 * gb, true},   // half free, but less than one make bench
	} {
		got := diskNote("/x/.stack", c.total, c.avail)
		if (got != "") != c.warn {
			t.Errorf("total %d GiB, free %d GiB: note %q, want a warning: %v", c.total/gb, c.avail/gb, got, c.warn)
		}
		if c.warn && !strings.Contains(got, "/x/.stack") {
			t.Errorf("the note does not name the directory: %q", got)
		}
	}
	if DiskNote("/nonexistent/dir/for/statfs") != "" {
		t.Error("an unreadable directory gave a warning")
	}
}
