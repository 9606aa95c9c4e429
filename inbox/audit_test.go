package inbox

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/internal/testenv"
)

// TestAuditModesSeeTheSameTransitions: the row trigger and the statement
// trigger must log the same changes, in the same order per aggregate, for
// every kind of statement the strategies issue: a creating upsert, an
// (id, 0, 0) row made to be locked (not a change), an upsert that matched
// nothing, a conditional update, an update of many rows at once and an
// update to the same values (not a change).
func TestAuditModesSeeTheSameTransitions(t *testing.T) {
	statements := []string{
		`INSERT INTO {A} AS a (id, balance, version) VALUES ('a', 5, 1)
			ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = 1 WHERE a.version = 0`,
		`INSERT INTO {A} (id, balance, version) VALUES ('b', 0, 0), ('c', 0, 0) ON CONFLICT DO NOTHING`,
		`INSERT INTO {A} AS a (id, balance, version) VALUES ('a', 7, 1)
			ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = 1 WHERE a.version = 0`,
		`INSERT INTO {A} AS a (id, balance, version) VALUES ('b', 3, 1)
			ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = 1 WHERE a.version = 0`,
		`UPDATE {A} SET balance = balance + 2, version = 2 WHERE id = 'a' AND version = 1`,
		`UPDATE {A} AS a SET balance = a.balance + d.delta, version = d.newv
			FROM unnest('{a,b,c}'::text[], '{1,2,3}'::bigint[], '{2,1,0}'::bigint[], '{4,3,1}'::bigint[]) AS d(id, delta, oldv, newv)
			WHERE a.id = d.id AND a.version = d.oldv`,
		`UPDATE {A} SET balance = balance WHERE id = 'a'`,
		`UPDATE {A} SET balance = balance + 1, version = 2 WHERE id = 'c' AND version = 7`,
	}
	want := []Transition{
		{"a", 0, 1, 0, 5}, {"b", 0, 1, 0, 3}, {"a", 1, 2, 5, 7},
		{"a", 2, 4, 7, 8}, {"b", 1, 3, 3, 5}, {"c", 0, 1, 0, 3},
	}
	for _, mode := range []AuditMode{AuditRow, AuditStatement, AuditLogged, AuditWAL} {
		t.Run(string(mode), func(t *testing.T) {
			in := newInbox(t, nil)
			ctx := context.Background()
			var wal *WALAudit
			if mode == AuditWAL {
				wal = startWAL(t, in)
			} else if err := InstallAudit(ctx, in.pool, in.Schema(), mode); err != nil {
				t.Fatal(err)
			}
			for _, q := range statements {
				if _, err := in.pool.Exec(ctx, strings.ReplaceAll(q, "{A}", in.Schema()+".account")); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if wal != nil {
				if err := wal.Finish(ctx); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := ReadSnapshot(ctx, in.pool, in.Schema(), "c", true)
			if err != nil {
				t.Fatal(err)
			}
			got := byAggregate(snap.Transitions)
			if w := byAggregate(want); !mapsEqual(got, w) {
				t.Fatalf("transitions per aggregate:\n got %v\nwant %v", got, w)
			}
		})
	}
}

// startWAL starts a logical decoding audit of in's schema. The server
// must allow it: the local stack runs with wal_level=logical and grants
// its role REPLICATION (a stack started before that must be restarted).
func startWAL(t *testing.T, in *Inbox) *WALAudit {
	t.Helper()
	cfg := testenv.Require(t, testenv.Postgres)
	w, err := StartWALAudit(context.Background(), cfg.PGURL, in.Schema())
	if err != nil {
		t.Fatalf("%v (the local stack sets both; restart a stack started before: bench stack down postgres && bench stack up postgres)", err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

// TestAuditWALRefusesWhatItCannotRead: a change of the account table the
// decoder cannot parse (a strategy that added a column) fails the audit
// instead of leaving a transition out.
func TestAuditWALRefusesWhatItCannotRead(t *testing.T) {
	in := newInbox(t, nil)
	ctx := context.Background()
	w := startWAL(t, in)
	a := in.Schema() + ".account"
	for _, q := range []string{"ALTER TABLE " + a + " ADD COLUMN note text", "INSERT INTO " + a + " VALUES ('x', 1, 1, 'n')"} {
		if _, err := in.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(ctx); err == nil || !strings.Contains(err.Error(), "could not be read") {
		t.Fatalf("Finish = %v, want an error saying a change could not be read", err)
	}
}

// installAudit installs the audit in mode and checks the log table's
// persistence (pg_class.relpersistence: "u" unlogged, "p" logged).
func installAudit(t *testing.T, in *Inbox, mode AuditMode, persistence string) {
	t.Helper()
	ctx := context.Background()
	if err := InstallAudit(ctx, in.pool, in.Schema(), mode); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := in.pool.QueryRow(ctx, `SELECT relpersistence FROM pg_class WHERE oid = $1::regclass`,
		in.Schema()+".account_audit").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != persistence {
		t.Fatalf("account_audit persistence %q, want %q", got, persistence)
	}
}

// TestAuditLostInACrashIsRefused: an unlogged log emptied by crash
// recovery (here: truncated by hand) must stop the checker, not make it
// report every effect as lost.
func TestAuditLostInACrashIsRefused(t *testing.T) {
	in := newInbox(t, nil)
	ctx := context.Background()
	installAudit(t, in, AuditStatement, "u") // unlogged
	if _, err := in.pool.Exec(ctx, "TRUNCATE "+in.Schema()+".account_audit"); err != nil {
		t.Fatal(err)
	}
	_, err := ReadSnapshot(ctx, in.pool, in.Schema(), "c", true)
	if err == nil || !strings.Contains(err.Error(), "server crashed") {
		t.Fatalf("ReadSnapshot after the log was emptied: %v, want an error saying the log was lost", err)
	}
}

// TestLoggedAuditSurvivesWhatUnloggedDoesNot: the logged mode writes the
// log into a logged table (a standby has its rows after a promotion;
// TestAuditModesSeeTheSameTransitions holds its transitions to the
// others').
func TestLoggedAuditSurvivesWhatUnloggedDoesNot(t *testing.T) {
	in := newInbox(t, nil)
	ctx := context.Background()
	installAudit(t, in, AuditLogged, "p") // logged
	if _, err := in.pool.Exec(ctx, "INSERT INTO "+in.Schema()+".account (id, balance, version) VALUES ('acct-1', 10, 1)"); err != nil {
		t.Fatal(err)
	}
	snap, err := ReadSnapshot(ctx, in.pool, in.Schema(), "c", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Transitions) != 1 || snap.Transitions[0].NewVersion != 1 || snap.Transitions[0].NewBalance != 10 {
		t.Errorf("transitions %+v, want acct-1 v0 → v1 (+10)", snap.Transitions)
	}
	if AuditLogged.Describe() != "statement-trigger, logged" {
		t.Errorf("Describe = %q", AuditLogged.Describe())
	}
}

func TestAuditModeNames(t *testing.T) {
	for _, m := range AuditModes {
		got, err := ParseAuditMode(string(m))
		if err != nil || got != m {
			t.Errorf("ParseAuditMode(%q) = %q, %v", m, got, err)
		}
	}
	if _, err := ParseAuditMode("rows"); err == nil || !strings.Contains(err.Error(), "statement, row, logged, off") {
		t.Errorf("ParseAuditMode(rows): %v, want an error listing the modes", err)
	}
}

func byAggregate(ts []Transition) map[string][]Transition {
	m := map[string][]Transition{}
	for _, t := range ts {
		m[t.Aggregate] = append(m[t.Aggregate], t)
	}
	return m
}

func mapsEqual(a, b map[string][]Transition) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestParseWALChange reads test_decoding's lines for the account table and
// refuses any other shape rather than guess.
func TestParseWALChange(t *testing.T) {
	for _, tc := range []struct {
		line         string
		id           string
		balance, ver int64
		ok           bool
	}{
		{"table ib_x.account: UPDATE: id[text]:'acct-000001' balance[bigint]:10 version[bigint]:2", "acct-000001", 10, 2, true},
		{"table \"ib X\".account: INSERT: id[text]:'a''b c balance[bigint]:1' balance[bigint]:-5 version[bigint]:0", "a'b c balance[bigint]:1", -5, 0, true},
		{"table ib_x.account: UPDATE: id[text]:'acct-1' balance[bigint]:10 version[bigint]:2 note[text]:'x'", "", 0, 0, false},
		{"table ib_x.account: UPDATE: id[text]:'acct-1' note[text]:'x' balance[bigint]:10 version[bigint]:2", "", 0, 0, false},
		{"table ib_x.account: UPDATE: id[text]:'acct-1' balance[bigint]:null version[bigint]:2", "", 0, 0, false},
		{"table ib_x.account: UPDATE: (no-tuple-data)", "", 0, 0, false},
	} {
		id, bal, ver, ok := parseWALChange(tc.line)
		if ok != tc.ok || id != tc.id || bal != tc.balance || ver != tc.ver {
			t.Errorf("%s: got %q %d %d %t, want %q %d %d %t", tc.line, id, bal, ver, ok, tc.id, tc.balance, tc.ver, tc.ok)
		}
	}
}
