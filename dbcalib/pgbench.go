package dbcalib

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// FindPGBench returns the pgbench binary: Debian keeps it with the server
// binaries under /usr/lib/postgresql/<major>/bin (the newest major wins),
// elsewhere it is usually in PATH.
func FindPGBench() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	for _, d := range dirs {
		p := filepath.Join(d, "pgbench")
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("pgbench not found under /usr/lib/postgresql/*/bin or in PATH: install the Debian package postgresql (or postgresql-client-N elsewhere)")
}

// PGBenchRun is one pgbench measurement.
type PGBenchRun struct {
	// TPS is the mean of pgbench's per-second progress after the warm-up.
	TPS float64
	// EventsPerS is TPS times the events of one transaction.
	EventsPerS float64
	// Failed counts transactions pgbench reported as failed.
	Failed int64
	// Command is the pgbench command line, the password left out.
	Command []string
	// CPU is the twin's CPU per event, when the server runs on this host.
	CPU *CPU
}

// pgbenchAppName is the application_name of the twin's connections.
const pgbenchAppName = "inboxbench-twin"

// Target is the server a twin runs against and how it is measured.
type Target struct {
	// PGURL is the server, a libpq URL.
	PGURL string
	// Warmup is left out of the rate; Measure is measured after it.
	Warmup, Measure time.Duration
	// Local is a pool on the server when it runs on this host: the
	// twin's CPU is then sampled. Nil otherwise.
	Local *pgxpool.Pool
}

// RunPGBench runs s's twin with pgbench (the program bin) for warm-up
// plus measure against at's server and measures its steady rate: the
// per-second progress after the warm-up.
func RunPGBench(ctx context.Context, bin string, s Shape, at Target) (PGBenchRun, error) {
	script, err := Script(s)
	if err != nil {
		return PGBenchRun{}, err
	}
	f, err := os.CreateTemp("", "inboxbench-twin-*.sql")
	if err != nil {
		return PGBenchRun{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return PGBenchRun{}, err
	}
	if err := f.Close(); err != nil {
		return PGBenchRun{}, err
	}
	secs := int((at.Warmup + at.Measure + time.Second - 1) / time.Second)
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(s.Clients), "-j", strconv.Itoa(min(s.Clients, runtime.NumCPU())),
		"-T", strconv.Itoa(secs), "-P", "1"}
	for _, d := range s.Defines() {
		args = append(args, "-D", d)
	}
	args = append(args, "-f", f.Name())
	run := PGBenchRun{Command: append([]string{bin}, append(args, "$INBOXBENCH_PG_URL")...)}
	conn, passfile, err := withoutPassword(at.PGURL)
	if err != nil {
		return run, fmt.Errorf("pgbench (twin of %s): %w", s.Strategy, err)
	}
	cmd := exec.CommandContext(ctx, bin, append(args, conn)...)
	cmd.Env = append(os.Environ(), "PGAPPNAME="+pgbenchAppName)
	if passfile != "" {
		defer os.Remove(passfile)
		cmd.Env = append(cmd.Env, "PGPASSFILE="+passfile)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return run, fmt.Errorf("pgbench (twin of %s): %w", s.Strategy, err)
	}
	var stop func(time.Duration) (CPU, error)
	if at.Local != nil {
		pid := cmd.Process.Pid
		sm := &sampler{pool: at.Local, client: func() (time.Duration, error) { _, c, err := procCPU(pid); return c, err },
			side: func(context.Context) (string, string, error) { return s.Schema, pgbenchAppName, nil }}
		stop = sm.start(ctx)
	}
	err = cmd.Wait()
	if stop != nil {
		if c, cerr := stop(at.Warmup); cerr == nil {
			run.CPU = &c
		}
	}
	if err != nil {
		return run, fmt.Errorf("pgbench (twin of %s): %w: %s", s.Strategy, err, lastLines(stderr.String(), 5))
	}
	out := stdout.String() + stderr.String()
	if strings.Contains(out, "aborted") {
		return run, fmt.Errorf("pgbench (twin of %s): a client aborted: %s", s.Strategy, lastLines(out, 5))
	}
	run.TPS, err = steadyTPS(stderr.String(), at.Warmup)
	if err != nil {
		return run, fmt.Errorf("pgbench (twin of %s): %w", s.Strategy, err)
	}
	run.EventsPerS = run.TPS * float64(s.EventsPerTx())
	if m := failedRE.FindStringSubmatch(out); m != nil {
		run.Failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return run, nil
}

var (
	// progress: 5.0 s, 3512.3 tps, lat 2.272 ms stddev 0.514, 0 failed
	progressRE = regexp.MustCompile(`(?m)^progress: ([0-9.]+) s, ([0-9.]+) tps`)
	failedRE   = regexp.MustCompile(`number of failed transactions: ([0-9]+)`)
)

// steadyTPS averages pgbench's progress lines that end after warmup.
func steadyTPS(progress string, warmup time.Duration) (float64, error) {
	var sum float64
	var n int
	for _, m := range progressRE.FindAllStringSubmatch(progress, -1) {
		at, _ := strconv.ParseFloat(m[1], 64)
		tps, _ := strconv.ParseFloat(m[2], 64)
		if at > warmup.Seconds() {
			sum += tps
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("no progress line after the %s warm-up in pgbench's output: %s", warmup, lastLines(progress, 3))
	}
	return sum / float64(n), nil
}

func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
