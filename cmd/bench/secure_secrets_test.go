package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
	"github.com/inboxbench/inboxbench/results"
)

// TestSecureNoSecretAnywhere runs the commands a team runs before
// adopting a broker against the secure stack (`bench stack up --secure`)
// — bench stack status, bench run over the baseline and the three
// brokers, a short bench conform, bench calibrate of the three vendor
// tools, bench calibrate-db with pgbench, bench report and bench publish —
// and then looks for every one of the stack's passwords (the suite's and
// the services' administrators'), as given and as a URL or JSON would
// carry them, in: every process's command line, sampled all along (ps);
// everything the commands printed; every file they wrote (the results,
// the published site) and every file written meanwhile under the secure
// stack's directory (the services' logs, the vendor tools' logs) and in
// the temporary directory (argument files, passfiles, key stores that
// should be gone); pg_stat_statements, which the suite's role reads. It
// finds nothing. Of the files the stack wrote before, a log holds no
// password and any other file that does is readable by this user only.
func TestSecureNoSecretAnywhere(t *testing.T) {
	cfg := testenv.Secure(t, testenv.Postgres, testenv.RabbitMQ, testenv.Kafka, testenv.RocketMQ)
	stackDir := cfg.StackDir
	creds, err := compose.ReadCredentials(testenv.SecureEnv(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	secrets := needles(append(cfg.Secrets(), slices.Collect(maps.Values(creds))...))
	if len(secrets) < 6 {
		t.Fatalf("the secure stack's credentials: %d forms of its passwords to look for, want at least one per password", len(secrets))
	}
	start := time.Now().Add(-time.Second)
	out, site := t.TempDir(), t.TempDir()
	// The commands' temporary files (pgbench's passfile, calibrate's
	// argument files and key stores) go to a directory of this test's,
	// looked at whole afterwards: what is left there was left by them.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	runID := "secrets-" + time.Now().UTC().Format("20060102-150405")

	ps := sampleProcesses(t)
	printed := captureStdout(t)
	var stderr bytes.Buffer
	bench := func(args ...string) {
		t.Helper()
		args = append([]string{"--secure", "--stack-dir", stackDir}, args...)
		began := time.Now()
		var e bytes.Buffer
		code := run(context.Background(), args, io.MultiWriter(&e, &stderr))
		t.Logf("bench %s: exit %d in %s", strings.Join(args[3:], " "), code, time.Since(began).Round(time.Second))
		// calibrate-db exits 1 when a goal of its ratios is not met:
		// figures of this loaded machine, not what this test is about.
		goal := code == 1 && args[3] == "calibrate-db" && strings.Contains(e.String(), "calibration goal was not met")
		if code != 0 && !goal {
			t.Errorf("bench %s: exit %d\n%s", strings.Join(args, " "), code, tailLines(e.String(), 20))
		}
	}
	bench("stack", "status")
	bench("run", "--brokers", "none,rabbitmq,kafka,rocketmq", "--workload", "../../workloads/smoke.yaml", "--run-id", runID, "--out", out)
	bench("conform", "--brokers", "rabbitmq,kafka,rocketmq", "--scenarios", "duplicate", "--strategies", "tx", "--run-id", runID+"-conform", "--out", out)
	bench("calibrate", "--brokers", "rabbitmq,kafka,rocketmq", "--duration", "11s", "--warmup", "2s", "--max-drain", "30s", "--run-id", runID+"-calibrate", "--out", out)
	bench("calibrate-db", "--workload", "../../workloads/calibrate.yaml", "--strategies", "tx", "--compare", "pgbench", "--rounds", "1", "--duration", "2s", "--json", filepath.Join(out, runID+"-calibrate-db.json"))
	bench("report", filepath.Join(out, runID))
	bench("publish", out, "--out", site)
	stdout := printed()
	procs := ps()

	// The calibration measured every broker through its vendor tool.
	if cal, err := results.ReadCalibration(filepath.Join(out, runID+"-calibrate", results.CalibrationFile)); err != nil {
		t.Errorf("calibrate.json: %v", err)
	} else {
		for _, b := range cal.Brokers {
			t.Logf("calibrate %s: publish vendor %.0f driver %.0f (ratio %.2f), consume vendor %.0f driver %.0f (ratio %.2f)", b.Broker,
				b.Vendor.Publish.MsgsPerS, b.Driver.Publish.MsgsPerS, b.PublishRatio, b.Vendor.Consume.MsgsPerS, b.Driver.Consume.MsgsPerS, b.ConsumeRatio)
			if b.Error != "" || b.PublishRatio <= 0 || b.ConsumeRatio <= 0 {
				t.Errorf("calibrate %s over TLS and authentication: publish ratio %.2f, consume ratio %.2f, error %q", b.Broker, b.PublishRatio, b.ConsumeRatio, b.Error)
			}
		}
		if len(cal.Brokers) != 3 {
			t.Errorf("calibrate.json has %d brokers, want 3", len(cal.Brokers))
		}
	}

	found := func(where string, text []byte) {
		for _, s := range secrets {
			if bytes.Contains(text, []byte(s)) {
				t.Errorf("a secret (%d characters, starting %q) is in %s", len(s), s[:min(3, len(s))], where)
			}
		}
	}
	for _, line := range strings.Split(string(procs), "\n") {
		masked := line
		for _, s := range secrets {
			masked = strings.ReplaceAll(masked, s, "***")
		}
		if masked != line {
			t.Errorf("a process's command line (ps) holds a secret: %s", masked[:min(len(masked), 300)])
		}
	}
	found("what bench printed", append(stdout, stderr.Bytes()...))
	files := 0
	for _, root := range []string{out, site, filepath.Join(stackDir, compose.VariantSecure)} {
		files += scanFiles(t, root, start, found)
	}
	files += scanFiles(t, tmp, time.Time{}, found)
	files += scanStack(t, testenv.SecureEnv(t, cfg), start, secrets)
	statements(t, cfg, secrets)
	t.Logf("looked for %d secrets in %d files, %d bytes of ps output and %d bytes printed", len(secrets), files, len(procs), len(stdout)+stderr.Len())
}

// needles are the forms in which secrets could show: as given, and as a
// URL, a query or a JSON string would carry them.
func needles(secrets []string) []string {
	var out []string
	for _, s := range secrets {
		if len(s) < 6 {
			continue // too short to tell from other text; the stack's are longer
		}
		for _, f := range []string{s, url.QueryEscape(s), url.PathEscape(s), strings.Trim(fmt.Sprintf("%q", s), `"`)} {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// sampleProcesses records every process's full command line every 100 ms
// until the returned function is called, which returns what it saw.
func sampleProcesses(t *testing.T) func() []byte {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		buf  bytes.Buffer
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			outp, err := exec.Command("ps", "-eww", "-o", "args=").Output()
			if err != nil {
				t.Errorf("ps: %v", err)
				return
			}
			mu.Lock()
			sc := bufio.NewScanner(bytes.NewReader(outp))
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				if l := sc.Text(); !seen[l] {
					seen[l] = true
					buf.WriteString(l + "\n")
				}
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	get := func() []byte {
		once.Do(func() { close(stop); <-done })
		mu.Lock()
		defer mu.Unlock()
		return buf.Bytes()
	}
	t.Cleanup(func() { get() })
	return get
}

// captureStdout sends what this process prints to a buffer until the
// returned function is called, which returns it.
func captureStdout(t *testing.T) func() []byte {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stdout
	os.Stdout = w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&buf, r); close(done) }()
	var once sync.Once
	get := func() []byte {
		once.Do(func() { os.Stdout = orig; w.Close(); <-done; r.Close() })
		return buf.Bytes()
	}
	t.Cleanup(func() { get() })
	return get
}

// scanFiles looks into every regular file under root written since
// start, and returns how many.
func scanFiles(t *testing.T, root string, since time.Time, found func(string, []byte)) int {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) || os.IsPermission(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.ModTime().Before(since) {
			return nil
		}
		n++
		scanFile(t, p, found)
		return nil
	})
	if err != nil {
		t.Errorf("walk %s: %v", root, err)
	}
	return n
}

// scanFile reads a file in pieces that overlap by more than any secret.
func scanFile(t *testing.T, path string, found func(string, []byte)) {
	f, err := os.Open(path)
	if err != nil {
		return // gone meanwhile (a rotated log), or not ours to read
	}
	defer f.Close()
	const chunk, overlap = 4 << 20, 4096
	buf := make([]byte, chunk+overlap)
	keep := 0
	for {
		n, err := io.ReadFull(f, buf[keep:])
		data := buf[:keep+n]
		if len(data) > 0 {
			found(path, data)
		}
		if err != nil {
			return
		}
		keep = copy(buf, data[len(data)-overlap:])
	}
}

func tailLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// scanStack looks at the files the stack wrote before the commands ran
// (its configuration, the servers' data and logs): a log (a service's
// Logs, a *.log file that is not a RocksDB write-ahead log, anything in a
// logs directory) holds no password, and a file that
// holds one (a server's configuration, its store of users) is readable
// by this user only, by its mode or its directory's. It returns how many
// files it read.
func scanStack(t *testing.T, e *compose.Env, since time.Time, secrets []string) int {
	root := e.Path()
	logs := map[string]bool{}
	for _, s := range compose.Services(e.Variant) {
		for _, l := range s.Logs(e) {
			logs[l] = true
		}
	}
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || !info.ModTime().Before(since) {
			return nil
		}
		n++
		var hit bool
		scanFile(t, p, func(_ string, b []byte) {
			for _, s := range secrets {
				hit = hit || bytes.Contains(b, []byte(s))
			}
		})
		if !hit {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case logs[p] || (strings.HasSuffix(p, ".log") && !rocksDB(filepath.Dir(p))) || slices.Contains(strings.Split(filepath.ToSlash(rel), "/"), "logs"):
			t.Errorf("the stack's log %s holds a password", p)
		case !private(root, p):
			t.Errorf("%s holds a password and other users may read it (mode %v)", p, info.Mode().Perm())
		}
		return nil
	})
	return n
}

// private reports whether only this user can read path: the file's mode
// gives the others nothing, or a directory on its way from root does not
// let them in.
func private(root, path string) bool {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o044 == 0 {
		return true
	}
	for d := filepath.Dir(path); strings.HasPrefix(d, root); d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o011 == 0 {
			return true
		}
		if d == root {
			break
		}
	}
	return false
}

// statements: pg_stat_statements, which the suite's role reads (it has
// pg_read_all_stats through pg_monitor), records no statement that holds
// a password: the stack sends the role's password as its SCRAM verifier.
func statements(t *testing.T, cfg config.Config, secrets []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.PGURL)
	if err != nil {
		t.Errorf("postgres: %v", cfg.RedactError(err))
		return
	}
	defer conn.Close(ctx)
	for _, s := range secrets {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_statements WHERE strpos(query, $1) > 0", s).Scan(&n); err != nil {
			t.Errorf("pg_stat_statements: %v", err)
			return
		}
		if n > 0 {
			t.Errorf("pg_stat_statements records %d statements with a password in their text", n)
		}
	}
}

// rocksDB reports whether dir is a RocksDB database (CURRENT names its
// MANIFEST), whose write-ahead log files end in .log: a store, not a log
// (RocketMQ 5 keeps its users in one, with the passwords it verifies
// request signatures with).
func rocksDB(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "CURRENT"))
	return err == nil && strings.HasPrefix(string(b), "MANIFEST-")
}
