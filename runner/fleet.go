package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

// fleet is the coordinator's view of the run's workers: the local
// processes it keeps alive, and the control rows every worker reads.
type fleet struct {
	ctl    *pgxpool.Pool
	runID  string
	want   int // workers a cell waits for before publishing
	join   time.Duration
	log    func(string)
	slots  []*slot
	errs   chan error
	stopHB context.CancelFunc
	hbDone chan struct{}
	seq    int
}

// slot is one local worker process, started again when it dies.
type slot struct {
	mu      sync.Mutex
	proc    *os.Process
	planned bool // the coordinator stopped it on purpose (planned restart)
	crashes int  // times it died of SIGKILL and was replaced
}

func startFleet(ctx context.Context, o Options) (*fleet, error) {
	ctl, err := pgxpool.New(ctx, o.Cfg.PGURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	f := &fleet{ctl: ctl, runID: o.RunID, want: o.Workers.Local + o.Workers.Remote, join: o.Workers.JoinTimeout, errs: make(chan error, o.Workers.Local+1),
		log: func(s string) { fmt.Fprintln(o.Console.Progress, s) }, hbDone: make(chan struct{})}
	if err := f.register(ctx); err != nil {
		ctl.Close()
		return nil, err
	}
	hbCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stopHB = stop
	go f.heartbeat(hbCtx)
	if o.Workers.Remote > 0 {
		f.log(fmt.Sprintf("run %s waits for %d remote worker(s): start each with `bench worker --run-id %s` (same --pg-url and broker settings)",
			o.RunID, o.Workers.Remote, o.RunID))
	}
	for i := range o.Workers.Local {
		s := &slot{}
		f.slots = append(f.slots, s)
		go f.keep(ctx, o, i, s)
	}
	return f, nil
}

// register creates the control schema and the run's row. Control rows are
// only needed while a run lasts; a day later they are clutter (the results
// live in result.json), so older ones go.
func (f *fleet) register(ctx context.Context) error {
	if err := ensureControl(ctx, f.ctl); err != nil {
		return err
	}
	if _, err := f.ctl.Exec(ctx, "DELETE FROM inboxbench_runs.run WHERE created_at < now() - interval '1 day'"); err != nil {
		return fmt.Errorf("postgres: clean up old runs: %w", err)
	}
	if _, err := f.ctl.Exec(ctx, "INSERT INTO inboxbench_runs.run (run_id, state) VALUES ($1, 'running')", f.runID); err != nil {
		return fmt.Errorf("postgres: register run %s (a run id can be used once): %w", f.runID, err)
	}
	return nil
}

// heartbeat tells workers the coordinator is alive: a worker whose
// coordinator went silent gives up instead of waiting forever.
func (f *fleet) heartbeat(ctx context.Context) {
	defer close(f.hbDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = f.ctl.Exec(ctx, "UPDATE inboxbench_runs.run SET seen_at = now() WHERE run_id = $1", f.runID)
		}
	}
}

// keep runs local worker i, and starts it again after it died: a kill -9
// (the crash fault, or anyone's) or a planned restart. A worker that
// keeps failing for another reason ends the cell with its error output.
func (f *fleet) keep(ctx context.Context, o Options, i int, s *slot) {
	fails := 0
	for ctx.Err() == nil {
		x, err := f.runOnce(o, s)
		if err != nil {
			f.errs <- fmt.Errorf("start worker %d (%s): %w", i, strings.Join(o.Workers.Cmd, " "), err)
			return
		}
		switch {
		case ctx.Err() != nil, f.finished():
			return
		case x.planned, x.killed:
			continue
		case x.err == nil:
			continue // left early (its cell closed under it): join the next one
		}
		if fails++; fails >= 3 {
			f.errs <- fmt.Errorf("worker %d failed %d times, last: %v: %s", i, fails, x.err, x.out)
			return
		}
		f.log(fmt.Sprintf("worker %d exited (%v), starting it again: %s", i, x.err, x.out))
		ctxtime.Sleep(ctx, time.Second)
	}
}

// exit is how a worker process ended: killed by SIGKILL, stopped by the
// coordinator on purpose (planned), or with err and its last output.
type exit struct {
	err             error
	out             string
	killed, planned bool
}

// runOnce starts one worker process in slot s and waits for it; the
// error says it could not start.
func (f *fleet) runOnce(o Options, s *slot) (exit, error) {
	args := append(append([]string(nil), o.Workers.Cmd[1:]...), "--run-id", f.runID)
	cmd := exec.Command(o.Workers.Cmd[0], args...)
	cmd.Env = append(os.Environ(), o.Cfg.Environ()...)
	var t tail
	cmd.Stdout, cmd.Stderr = &t, &t
	if err := cmd.Start(); err != nil {
		return exit{}, err
	}
	s.mu.Lock()
	s.proc = cmd.Process
	s.mu.Unlock()
	x := exit{err: cmd.Wait()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc = nil
	x.planned, s.planned = s.planned, false
	var ee *exec.ExitError
	x.killed = errors.As(x.err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	if x.killed && !x.planned {
		s.crashes++
	}
	x.out = strings.TrimSpace(t.String())
	return x, nil
}

func (f *fleet) finished() bool {
	select {
	case <-f.hbDone:
		return true
	default:
		return false
	}
}

// restart stops local worker i gracefully (SIGTERM: it leaves the group
// and reports); keep starts a new one.
func (f *fleet) restart(i int) bool {
	if len(f.slots) == 0 {
		return false
	}
	s := f.slots[i%len(f.slots)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	s.planned = true
	_ = s.proc.Signal(syscall.SIGTERM)
	return true
}

func (f *fleet) crashRestarts() int {
	n := 0
	for _, s := range f.slots {
		s.mu.Lock()
		n += s.crashes
		s.mu.Unlock()
	}
	return n
}

// finish marks the run finished (workers exit), waits a little for the
// local ones and kills what is left.
func (f *fleet) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, _ = f.ctl.Exec(ctx, "UPDATE inboxbench_runs.run SET state = 'finished' WHERE run_id = $1", f.runID)
	f.stopHB()
	<-f.hbDone
	for ctx.Err() == nil && f.alive() > 0 {
		ctxtime.Sleep(ctx, 100*time.Millisecond)
	}
	for _, s := range f.slots {
		s.mu.Lock()
		if s.proc != nil {
			_ = s.proc.Kill()
		}
		s.mu.Unlock()
	}
	f.ctl.Close()
}

func (f *fleet) alive() int {
	n := 0
	for _, s := range f.slots {
		s.mu.Lock()
		if s.proc != nil {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// tail keeps the last 4 KiB a worker printed, for error messages.
type tail struct {
	mu sync.Mutex
	b  []byte
}

// Write keeps the end of what the worker wrote.
func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

// String is what was kept, made valid UTF-8 (a cut may split a rune).
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.b, nil))
}
