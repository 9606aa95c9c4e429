package inbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ContentionReport is what the sampler saw of one group of connections
// (those whose application_name is the sampled name) during a run.
type ContentionReport struct {
	Samples int
	// Busy counts sampled backend states that were running a statement or
	// idle inside a transaction; LockWaits counts, per wait event
	// ("Lock/transactionid", "Lock/tuple", "Lock/spectoken" …), the busy
	// states that were waiting for a heavyweight lock.
	Busy      int64
	LockWaits map[string]int64
	// Waits counts every non-idle wait event (LWLock, IO, Lock …).
	Waits map[string]int64
	// BlockedMax is the largest number of the group's backends blocked at
	// once (pg_blocking_pids non-empty): the size of the blocked-by graph.
	BlockedMax int
	// Database-wide deltas of pg_stat_database over the sampled period.
	// They include other sessions of the same database: run one thing at
	// a time when you read them.
	Commits, Rollbacks, Deadlocks int64
	// Top statements by total execution time over the period
	// (pg_stat_statements deltas).
	Top []StatementStat
	// TopMissing says why Top is empty although pg_stat_statements was
	// read at the start: its second reading failed.
	TopMissing string
	// Series has one point per second.
	Series []ContentionPoint
}

// LockWaitShare is the share of busy backend states waiting on a lock.
func (r *ContentionReport) LockWaitShare() float64 {
	if r.Busy == 0 {
		return 0
	}
	var n int64
	for _, v := range r.LockWaits {
		n += v
	}
	return float64(n) / float64(r.Busy)
}

// StatementStat is one statement's delta.
type StatementStat struct {
	Query string
	Calls int64
	// Rows is what the calls returned or changed, summed
	// (pg_stat_statements' rows).
	Rows    int64
	MeanMs  float64
	TotalMs float64
}

// ContentionPoint aggregates the samples of one second.
type ContentionPoint struct {
	At        time.Duration
	LockWaits map[string]int64
	Blocked   int
}

// Totals are the busy backend states and the lock waits among them,
// sampled so far: the difference of two readings is the lock-wait share
// of a window (a rate step, say).
type Totals struct{ Busy, LockWaits int64 }

// Share is the lock-wait share between an earlier reading and this one.
func (t Totals) Share(since Totals) float64 {
	if busy := t.Busy - since.Busy; busy > 0 {
		return float64(t.LockWaits-since.LockWaits) / float64(busy)
	}
	return 0
}

// ContentionSampler polls pg_stat_activity on its own connection.
type ContentionSampler struct {
	conn    *pgx.Conn
	appName string
	// ports, when set, picks the backends by their client port instead
	// (a service under test, whose application_name is its own);
	// portsAt and known are its last answer, asked again every second.
	ports   func() []int
	portsAt time.Time
	known   []int
	every   time.Duration
	start   time.Time
	cancel  context.CancelFunc
	done    chan struct{}

	mu     sync.Mutex
	rep    ContentionReport
	totals Totals
	err    error
	db0    [3]int64
	stmts0 map[int64]stmtRow
}

type stmtRow struct {
	query   string
	calls   int64
	rows    int64
	totalMs float64
}

// StartContention connects with connString (its own connection, labelled
// inboxbench-sampler so it never samples itself) and samples the backends
// whose application_name is appName every interval (100ms is a good
// default) until Stop.
func StartContention(ctx context.Context, connString, appName string, every time.Duration) (*ContentionSampler, error) {
	return startContention(ctx, connString, &ContentionSampler{appName: appName, every: every})
}

// StartContentionOf samples the backends whose client port is one of
// ports' (asked again every second): the connections of processes the
// caller knows by their sockets, such as a service under test's.
func StartContentionOf(ctx context.Context, connString string, ports func() []int, every time.Duration) (*ContentionSampler, error) {
	return startContention(ctx, connString, &ContentionSampler{ports: ports, every: every})
}

func startContention(ctx context.Context, connString string, s *ContentionSampler) (*ContentionSampler, error) {
	cc, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("contention sampler: %w", err)
	}
	cc.RuntimeParams["application_name"] = "inboxbench-sampler"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("contention sampler: connect: %w", err)
	}
	s.conn, s.start, s.done = conn, time.Now(), make(chan struct{})
	s.rep = ContentionReport{LockWaits: map[string]int64{}, Waits: map[string]int64{}}
	if s.db0, err = s.dbStats(ctx); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	// pg_stat_statements is optional: without it the report has no top
	// statements, and says nothing false.
	s.stmts0, _ = s.statements(ctx)
	sctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.loop(sctx)
	return s, nil
}

func (s *ContentionSampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	var cur *ContentionPoint
	for {
		select {
		case <-ctx.Done():
			if cur != nil {
				s.rep.Series = append(s.rep.Series, *cur)
			}
			return
		case <-t.C:
		}
		at := time.Since(s.start).Truncate(time.Second)
		if cur == nil || cur.At != at {
			if cur != nil {
				s.mu.Lock()
				s.rep.Series = append(s.rep.Series, *cur)
				s.mu.Unlock()
			}
			cur = &ContentionPoint{At: at, LockWaits: map[string]int64{}}
		}
		if err := s.sample(ctx, cur); err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
	}
}

func (s *ContentionSampler) sample(ctx context.Context, cur *ContentionPoint) error {
	const q = `SELECT coalesce(wait_event_type, ''), coalesce(wait_event, ''), coalesce(state, ''),
		       cardinality(pg_blocking_pids(pid))
		FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND `
	var rows pgx.Rows
	var err error
	if s.ports != nil {
		if time.Since(s.portsAt) >= time.Second {
			s.known, s.portsAt = s.ports(), time.Now()
		}
		rows, err = s.conn.Query(ctx, q+"client_port = ANY($1)", s.known)
	} else {
		rows, err = s.conn.Query(ctx, q+"application_name = $1", s.appName)
	}
	if err != nil {
		return fmt.Errorf("contention sampler: pg_stat_activity: %w", err)
	}
	defer rows.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	blocked := 0
	for rows.Next() {
		var typ, ev, state string
		var blockers int
		if err := rows.Scan(&typ, &ev, &state, &blockers); err != nil {
			return err
		}
		if state != "active" && !strings.HasPrefix(state, "idle in transaction") {
			continue
		}
		s.rep.Busy++
		s.totals.Busy++
		if blockers > 0 {
			blocked++
		}
		if typ == "" || typ == "Client" {
			continue
		}
		name := typ + "/" + ev
		s.rep.Waits[name]++
		if typ == "Lock" {
			s.rep.LockWaits[name]++
			cur.LockWaits[name]++
			s.totals.LockWaits++
		}
	}
	s.rep.Samples++
	s.rep.BlockedMax = max(s.rep.BlockedMax, blocked)
	cur.Blocked = max(cur.Blocked, blocked)
	return rows.Err()
}

// Totals reads the running totals.
func (s *ContentionSampler) Totals() Totals {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totals
}

func (s *ContentionSampler) dbStats(ctx context.Context) ([3]int64, error) {
	var v [3]int64
	err := s.conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback, deadlocks
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&v[0], &v[1], &v[2])
	if err != nil {
		return v, fmt.Errorf("contention sampler: pg_stat_database: %w", err)
	}
	return v, nil
}

func (s *ContentionSampler) statements(ctx context.Context) (map[int64]stmtRow, error) {
	rows, err := s.conn.Query(ctx, `
		SELECT queryid, coalesce(query, '(text not kept by pg_stat_statements)'), calls, rows, total_exec_time
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND queryid IS NOT NULL AND query NOT ILIKE '%pg_stat_%'`)
	if err != nil {
		return nil, err
	}
	out := map[int64]stmtRow{}
	for rows.Next() {
		var id int64
		var r stmtRow
		if err := rows.Scan(&id, &r.query, &r.calls, &r.rows, &r.totalMs); err != nil {
			return nil, err
		}
		// The same queryid can appear once per user; add them up.
		prev := out[id]
		r.calls += prev.calls
		r.rows += prev.rows
		r.totalMs += prev.totalMs
		out[id] = r
	}
	return out, rows.Err()
}

// Stop ends sampling and returns the report. pg_stat_database counters are
// flushed by backends about once a second, so Stop waits that long first.
func (s *ContentionSampler) Stop(ctx context.Context) (ContentionReport, error) {
	s.cancel()
	<-s.done
	defer s.conn.Close(context.Background())
	s.mu.Lock()
	rep, err := s.rep, s.err
	s.mu.Unlock()
	if err != nil {
		return rep, err
	}
	select {
	case <-time.After(1100 * time.Millisecond):
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	db1, err := s.dbStats(ctx)
	if err != nil {
		return rep, err
	}
	rep.Commits, rep.Rollbacks, rep.Deadlocks = db1[0]-s.db0[0], db1[1]-s.db0[1], db1[2]-s.db0[2]
	if s.stmts0 != nil {
		now, err := s.statements(ctx)
		if err != nil {
			rep.TopMissing = fmt.Sprintf("the statements' times could not be read from pg_stat_statements after the cell (%v): the cell has no top statements", err)
		} else {
			for id, r := range now {
				d := StatementStat{Query: r.query, Calls: r.calls - s.stmts0[id].calls, Rows: r.rows - s.stmts0[id].rows, TotalMs: r.totalMs - s.stmts0[id].totalMs}
				if d.Calls <= 0 {
					continue
				}
				d.MeanMs = d.TotalMs / float64(d.Calls)
				rep.Top = append(rep.Top, d)
			}
			sort.Slice(rep.Top, func(i, j int) bool { return rep.Top[i].TotalMs > rep.Top[j].TotalMs })
			if len(rep.Top) > 10 {
				rep.Top = rep.Top[:10]
			}
		}
	}
	return rep, nil
}
