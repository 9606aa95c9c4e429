package service

import (
	"strings"
	"testing"
	"time"
)

var testEffects = Effects{Table: "account", Aggregate: "id", State: "balance", Version: "version"}

func TestColumns(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{in: "id[text]:'acct-1' balance[bigint]:10 version[bigint]:2", want: map[string]string{"id": "acct-1", "balance": "10", "version": "2"}},
		{in: "id[character varying]:'it''s' n[integer]:null", want: map[string]string{"id": "it's"}},
		{in: `"Id"[text]:'a b' tags[text[]]:'{x,y}' ok[boolean]:true`, want: map[string]string{"Id": "a b", "tags": "{x,y}", "ok": "true"}},
		{in: "old-key: id[text]:'a' balance[bigint]:1 version[bigint]:1 new-tuple: id[text]:'a' balance[bigint]:3 version[bigint]:2",
			want: map[string]string{"id": "a", "balance": "3", "version": "2"}},
		{in: "id[text]:'open", err: "unterminated"},
		{in: "id:'x'", err: "[type]"},
		{in: "id[text]'x'", err: "no ':'"},
	} {
		got, err := columns(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("columns(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("columns(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("columns(%q)[%s] = %q, want %q", tc.in, k, got[k], v)
			}
		}
	}
}

// TestDecoderStampsCommits feeds the decoder the lines a slot returns
// for two transactions and checks each change gets its own commit time,
// other tables and statements are passed over, and nothing is returned
// before the COMMIT.
func TestDecoderStampsCommits(t *testing.T) {
	d := newDecoder("ib_x", testEffects)
	lines := []struct {
		xid  uint32
		data string
		n    int
	}{
		{7, "BEGIN 7", 0},
		{7, "table ib_x.account: INSERT: id[text]:'a' balance[bigint]:0 version[bigint]:0", 0},
		{7, "table ib_x.inbox: INSERT: consumer[text]:'c' event_id[text]:'a-v1'", 0},
		{7, "table ib_x.account: UPDATE: id[text]:'a' balance[bigint]:5 version[bigint]:1", 0},
		{7, "COMMIT 7 (at 2026-12-07 08:00:00.123456+00)", 2},
		{9, "table ib_x.account: TRUNCATE: (no-flags)", 0},
		{9, "table ib_x.account: UPDATE: id[text]:'a' balance[bigint]:7 version[bigint]:2", 0},
		{9, "COMMIT 9 (at 2026-12-07 08:00:01+00)", 1},
	}
	var got []Change
	for _, l := range lines {
		cs, err := d.line(l.xid, l.data)
		if err != nil {
			t.Fatalf("line %q: %v", l.data, err)
		}
		if len(cs) != l.n {
			t.Fatalf("line %q gave %d changes, want %d", l.data, len(cs), l.n)
		}
		got = append(got, cs...)
	}
	t0 := time.Date(2026, 12, 7, 8, 0, 0, 123456000, time.UTC)
	want := []Change{{Op: "INSERT", Aggregate: "a", Commit: t0, XID: 7}, {Op: "UPDATE", Aggregate: "a", State: 5, Version: 1, Commit: t0, XID: 7},
		{Op: "UPDATE", Aggregate: "a", State: 7, Version: 2, Commit: t0.Add(time.Second - 123456*time.Microsecond), XID: 9}}
	for i := range want {
		if !got[i].Commit.Equal(want[i].Commit) || got[i].Op != want[i].Op || got[i].State != want[i].State || got[i].Version != want[i].Version {
			t.Errorf("change %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestDecoderNamesWhatItCannotRead(t *testing.T) {
	d := newDecoder("ib_x", testEffects)
	for _, tc := range []struct{ line, want string }{
		{"table ib_x.account: UPDATE: id[text]:'a' balance[numeric]:1.5 version[bigint]:1", "balance \"1.5\" is not a whole number"},
		{"table ib_x.account: UPDATE: key[text]:'a' balance[bigint]:1 version[bigint]:1", "no id column"},
		{"table ib_x.account: UPDATE: id[text]:'a' version[bigint]:1", "no balance column"},
	} {
		if _, err := d.line(1, tc.line); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("line %q: err %v, want %q", tc.line, err, tc.want)
		}
	}
	if _, err := d.line(1, "COMMIT 1"); err == nil || !strings.Contains(err.Error(), "include-timestamp") {
		t.Errorf("a commit without its time: err %v", err)
	}
}

func TestQuotedTableName(t *testing.T) {
	d := newDecoder("Lab", Effects{Table: "Account", Aggregate: "id", State: "b", Version: "v"})
	if want := `table "Lab"."Account": `; d.prefix != want {
		t.Fatalf("prefix %q, want %q", d.prefix, want)
	}
}

// TestHistory checks which versions a change stamps: the first time
// each takes effect, every version a forward change covers, a stale or
// repeated change only its own, and an unchanged row none.
func TestHistory(t *testing.T) {
	t1, t2, t3 := time.Unix(1, 0), time.Unix(2, 0), time.Unix(3, 0)
	h := NewHistory()
	got := h.Add([]Change{
		{Op: "INSERT", Aggregate: "a", Commit: t1},                        // created at v0: nothing
		{Op: "UPDATE", Aggregate: "a", State: 10, Version: 1, Commit: t1}, // v1
		{Op: "UPDATE", Aggregate: "a", State: 60, Version: 4, Commit: t2}, // a batch: v2..v4
		{Op: "UPDATE", Aggregate: "a", State: 60, Version: 4, Commit: t2}, // unchanged: nothing
		{Op: "UPDATE", Aggregate: "a", State: 65, Version: 4, Commit: t3}, // v4 again: a duplicate, not a first
		{Op: "UPDATE", Aggregate: "b", State: 5, Version: 2, Commit: t3},  // b jumped: v1 and v2 stamped, the judge calls the gap
	})
	want := []Effect{{"a", 1, t1}, {"a", 2, t2}, {"a", 3, t2}, {"a", 4, t2}, {"b", 1, t3}, {"b", 2, t3}}
	if len(got) != len(want) {
		t.Fatalf("effects %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("effect %d = %v, want %v", i, got[i], want[i])
		}
	}
	if n := len(h.Transitions()); n != 4 {
		t.Errorf("%d transitions, want 4 (v0→v1, v1→v4, v4→v4 with another balance, b v0→v2)", n)
	}
}
