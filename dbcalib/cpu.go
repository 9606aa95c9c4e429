package dbcalib

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Throughput on a shared machine moves with everyone else's load; the CPU
// one event costs moves far less. So beside each side's events/s, a
// sampler reads, every 250 ms, the effects so far (the sum of the account
// versions: every fresh increment moves one account one version) and the
// CPU time of the side's two processes: the PostgreSQL backends serving
// it (by application_name, read from /proc, so only when the server runs
// on this host) and its client (this process for a none cell, the pgbench
// process for a twin). Over the steady window (after the warm-up, until
// the effects stop growing) that gives server and client CPU per event.
// With every core busy, throughput is the inverse of the CPU per event:
// the ratio of the CPU figures is what the throughput ratio is on a quiet
// machine.

// CPU is one side's CPU per event over its steady window, in µs.
type CPU struct {
	Server float64 `json:"server_us_per_event"`
	Client float64 `json:"client_us_per_event"`
	Total  float64 `json:"total_us_per_event"`
	// Events is what the window covered.
	Events int64 `json:"events"`
}

// usage is one sample.
type usage struct {
	at      time.Time
	effects int64
	server  time.Duration
	client  time.Duration
}

// sampler samples one side while it runs.
type sampler struct {
	pool *pgxpool.Pool
	// side names the side's schema and its backends' application_name
	// ("" until the schema exists).
	side   func(context.Context) (schema, appName string, err error)
	client func() (time.Duration, error)
	// seen keeps every backend's last CPU time, so one that leaves (a
	// connection closed) keeps counting what it used.
	seen    map[procID]time.Duration
	mu      sync.Mutex
	samples []usage
	err     error
}

const sampleEvery = 250 * time.Millisecond

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u, err := s.sample(ctx)
		s.mu.Lock()
		if err != nil && ctx.Err() == nil && s.err == nil {
			s.err = err
		}
		if err == nil {
			s.samples = append(s.samples, u)
		}
		s.mu.Unlock()
	}
}

func (s *sampler) sample(ctx context.Context) (usage, error) {
	u := usage{at: time.Now()}
	schema, appName, err := s.side(ctx)
	if err != nil || schema == "" {
		return u, err
	}
	q := "SELECT coalesce(sum(version), 0) FROM " + pgx.Identifier{schema, "account"}.Sanitize()
	if err := s.pool.QueryRow(ctx, q).Scan(&u.effects); err != nil {
		return u, err
	}
	rows, err := s.pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", appName)
	if err != nil {
		return u, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return u, err
	}
	if s.seen == nil {
		s.seen = map[procID]time.Duration{}
	}
	for _, pid := range pids {
		id, c, err := procCPU(int(pid))
		if err != nil {
			continue // a backend that just left
		}
		s.seen[id] = c
	}
	for _, c := range s.seen {
		u.server += c
	}
	u.client, err = s.client()
	return u, err
}

// start samples in the background; stop ends it and returns the window.
func (s *sampler) start(ctx context.Context) (stop func(warmup time.Duration) (CPU, error)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx) }()
	return func(warmup time.Duration) (CPU, error) {
		cancel()
		<-done
		return s.window(warmup)
	}
}

// window is the CPU per event between the first sample after warmup
// (counted from the first effect) and the last sample that still saw
// effects grow.
func (s *sampler) window(warmup time.Duration) (CPU, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return CPU{}, s.err
	}
	var first, from, to *usage
	for i := range s.samples {
		u := &s.samples[i]
		if u.effects > 0 && first == nil {
			first = u
		}
		if first != nil && from == nil && u.at.Sub(first.at) >= warmup {
			from = u
		}
		if from != nil && i > 0 && u.effects > s.samples[i-1].effects {
			to = u
		}
	}
	if from == nil || to == nil || to.effects <= from.effects {
		return CPU{}, errors.New("no steady window: the side ran too briefly after its warm-up to sample")
	}
	n := to.effects - from.effects
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	c := CPU{Server: per(to.server - from.server), Client: per(to.client - from.client), Events: n}
	c.Total = c.Server + c.Client
	return c, nil
}

// procID names a process across pid reuse: its pid and start time.
type procID struct {
	pid   int
	start string
}

// procCPU is a process's user+system CPU time from /proc.
func procCPU(pid int) (procID, time.Duration, error) {
	id := procID{pid: pid}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return id, 0, err
	}
	s := string(b)
	// Fields after the command, which is in parentheses and may hold
	// spaces: utime is f[11], stime f[12], starttime f[19].
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return id, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	id.start = f[19]
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return id, 0, err
	}
	// Linux reports clock ticks of 1/100 s (USER_HZ) on every platform Go
	// supports.
	return id, time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// selfCPU is this process's CPU time.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// serverIsLocal reports whether the PostgreSQL backends are processes of
// this host: the backend serving pool must be in /proc as a postgres
// process.
func serverIsLocal(ctx context.Context, pool *pgxpool.Pool) bool {
	var pid int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(b), "postgres")
}
