package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxbench/inboxbench/service"
)

// serviceConsumers are a service cell's consumers: the instances of the
// team's service, each a process group this one started, watched by a
// supervisor that starts it again when it ends (killed by a fault, or on
// its own: counted and noted), and the observer that reads their effects
// from the WAL into the cell's tally.
type serviceConsumers struct {
	c      *cell
	svc    *serviceRun
	logDir string
	insts  []*service.Instance
	// expected[i] marks an end of instance i the cell caused (a kill, a
	// planned restart): not an exit of the service's own.
	expected []atomic.Bool
	// starts[i] counts instance i's starts that became ready.
	starts       []atomic.Int64
	kills, exits atomic.Int64
	errs         chan error
	stopping     atomic.Bool
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	observed     chan struct{}
}

// restartAfter is how long a killed or exited instance stays down: long
// enough for its broker sessions to be seen gone, as a real crash's are.
const restartAfter = time.Second

// settleWrites is how long a stopped instance's sockets get to send what
// it had written before it is killed.
const settleWrites = 300 * time.Millisecond

func newServiceConsumers(c *cell) *serviceConsumers {
	n := c.svc.spec.Instances
	dir := filepath.Join(c.o.Output.Dir, c.o.RunID, "service", c.id)
	if c.o.Output.Dir == "" || c.o.Output.NoWrite {
		dir = filepath.Join(os.TempDir(), "inboxbench-service", c.o.RunID, c.id)
	}
	s := &serviceConsumers{c: c, svc: c.svc, logDir: dir, expected: make([]atomic.Bool, n), starts: make([]atomic.Int64, n), errs: make(chan error, n+1)}
	for i := range n {
		s.insts = append(s.insts, service.NewInstance(c.svc.spec, i, c.instanceEnv(i), filepath.Join(dir, fmt.Sprintf("instance-%d.log", i))))
	}
	return s
}

// start starts every instance at once and returns when all are ready,
// then observes the WAL and supervises them.
func (s *serviceConsumers) start(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(ctx)
	errs := make([]error, len(s.insts))
	var wg sync.WaitGroup
	for i, in := range s.insts {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = in.Start(ctx) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("service %s: %w", s.svc.spec.Name, err)
	}
	for i := range s.starts {
		s.starts[i].Add(1)
	}
	s.observed = make(chan struct{})
	go func() {
		defer close(s.observed)
		s.svc.observe(ctx, s.c.t, s.errs)
	}()
	for i := range s.insts {
		s.wg.Add(1)
		go s.supervise(ctx, i)
	}
	return nil
}

// supervise starts instance i again whenever it ends, until the cell
// stops.
func (s *serviceConsumers) supervise(ctx context.Context, i int) {
	defer s.wg.Done()
	in := s.insts[i]
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.Exited():
		}
		if s.stopping.Load() || ctx.Err() != nil {
			return
		}
		if !s.expected[i].Swap(false) {
			s.exits.Add(1)
			s.c.notes.add(fmt.Sprintf("service instance %d exited on its own and was started again (its output: %s)", i, in.Log()))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(restartAfter):
		}
		if err := in.Start(ctx); err != nil {
			if ctx.Err() == nil && !s.stopping.Load() {
				s.errs <- fmt.Errorf("service %s: start again: %w", s.svc.spec.Name, err)
			}
			return
		}
		s.starts[i].Add(1)
	}
}

func (*serviceConsumers) warm(context.Context, time.Time) {} // the observer feeds the cell's tally
func (s *serviceConsumers) failed() <-chan error          { return s.errs }
func (*serviceConsumers) lost() int64                     { return 0 }

// restart performs planned restart k: instance k asked to stop
// (SIGTERM), and started again by its supervisor.
func (s *serviceConsumers) restart(k int) {
	i := k % len(s.insts)
	s.expected[i].Store(true)
	go func() {
		if err := s.insts[i].Stop(); err != nil {
			s.c.notes.add(err.Error())
		}
	}()
}

// stop ends every instance (SIGTERM, then SIGKILL after the spec's
// grace) and reads what they committed last.
func (s *serviceConsumers) stop(ctx context.Context) error {
	s.stopping.Store(true)
	var errs []error
	for _, in := range s.insts {
		if err := in.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.observed != nil {
		<-s.observed
	}
	if s.svc.obs != nil && s.svc.failed.Load() == nil {
		errs = append(errs, s.svc.poll(s.c.t))
	}
	for _, err := range errs {
		if err != nil {
			s.c.notes.add(err.Error())
		}
	}
	return nil
}

// Instances implements ServiceControl.
func (s *serviceConsumers) Instances() int { return len(s.insts) }

// Kill implements ServiceControl: the instance is stopped (SIGSTOP) and
// its sockets given a moment to send what it had written, then killed
// (kill -9). A process killed at full speed may or may not have had its
// last ack leave the host (its socket is reset if deliveries sit unread
// in it, dropping what it had not sent): stopped first, it always has,
// so whether a fault catches a settle-too-early is never left to the
// kernel's timing. Kill returns once the supervisor started the instance
// again and it is ready, so the next fault meets a working instance.
func (s *serviceConsumers) Kill(ctx context.Context, i int) error {
	n := s.starts[i].Load()
	s.expected[i].Store(true)
	if s.insts[i].Pause() {
		time.Sleep(settleWrites)
	}
	if !s.insts[i].Kill() {
		s.expected[i].Store(false)
		return fmt.Errorf("instance %d was not running", i)
	}
	s.kills.Add(1)
	limit := time.After(restartAfter + s.svc.spec.Ready.Timeout.D() + 5*time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for s.starts[i].Load() == n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-limit:
			return fmt.Errorf("instance %d was not ready again after its kill", i)
		case <-tick.C:
		}
	}
	return nil
}

// Pause implements ServiceControl.
func (s *serviceConsumers) Pause(ctx context.Context, i int, d time.Duration) error {
	in := s.insts[i]
	if !in.Pause() {
		return fmt.Errorf("instance %d was not running", i)
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	in.Resume()
	return nil
}

// CutBroker implements ServiceControl.
func (s *serviceConsumers) CutBroker(ctx context.Context) (bool, error) {
	if s.svc.outside.Unproxied != "" || s.svc.proxies.Len() == 0 {
		return false, nil
	}
	return true, s.svc.proxies.Cut(ctx)
}

// DBClientPorts implements ServiceControl: the ports of the instances'
// connections to the configured PostgreSQL server.
func (s *serviceConsumers) DBClientPorts() ([]int, error) {
	cfg, err := pgconn.ParseConfig(s.c.o.Cfg.PGURL)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(cfg.Host) == nil && cfg.Host != "localhost" {
		return nil, fmt.Errorf("PostgreSQL at %s: the service's connections are found on this host's loopback only", cfg.Host)
	}
	var pids []int
	for _, in := range s.insts {
		pids = append(pids, in.Pids()...)
	}
	return service.LocalPorts(pids, int(cfg.Port))
}

// String names the consumers in errors.
func (s *serviceConsumers) String() string {
	return "service " + s.svc.spec.Name + " × " + strconv.Itoa(len(s.insts))
}
