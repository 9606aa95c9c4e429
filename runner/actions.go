package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Action is a mid-stream fault.
type Action struct {
	// Name says what it does, in the cell's notes and faults.
	Name string
	// At is the share of messages answered (0..1) that triggers it.
	At float64
	// Do injects the fault into cell c; it runs on a context of its own,
	// which the end of the cell does not cancel.
	Do func(ctx context.Context, c CellInfo) error
}

// CellInfo tells an action what it acts on.
type CellInfo struct {
	// Broker and Strategy name the cell; Schema, Consumer and Topic are
	// its inbox schema, the inbox's consumer and the broker's topic.
	Broker, Strategy, Schema, Consumer, Topic string
	// AppName is the application_name of the cell's database
	// connections (pg_terminate_backend targets them).
	AppName string
	// Hit, when the action calls it, marks the moment its fault hit (the
	// first call; the action's start otherwise) and says what it did
	// (every call): the cell's faults record both (results.Fault).
	Hit func(what string)
	// Service is the cell's service under test, for the faults only it
	// can take (nil in a cell of the suite's own consumer).
	Service ServiceControl
}

// ServiceControl is what a fault can do to a service under test from
// outside: its instances are process groups of this machine, its broker
// connections pass through the suite's proxy, its database connections
// are found by the ports its processes hold.
type ServiceControl interface {
	// Instances is how many instances the cell runs.
	Instances() int
	// Kill sends instance i SIGKILL (kill -9) and returns once it was
	// started again and is ready.
	Kill(ctx context.Context, i int) error
	// Pause stops instance i (SIGSTOP) for d, then continues it.
	Pause(ctx context.Context, i int, d time.Duration) error
	// CutBroker cuts every broker connection of the service, losing what
	// was in flight; it reports false when its connections do not pass
	// the proxy (the reason is in the cell's notes).
	CutBroker(ctx context.Context) (bool, error)
	// DBClientPorts are the local ports of the instances' connections to
	// PostgreSQL (pg_stat_activity.client_port).
	DBClientPorts() ([]int, error)
}

// actions fire a cell's mid-stream faults — the planned consumer restarts
// and Options.Stream.Actions (broker restarts, killed connections …) — once
// their share of the stream has been answered, one at a time: two faults
// injected in the same instant would hide each other.
type actions struct {
	list []Action
	info CellInfo
	// restartAt[k] is the answered count at which planned restart k fires.
	restartAt []int64
	cons      consumers
	total     int64 // messages the stream holds
	t         *tally
	notes     *notes
	faults    faultLog

	mu       sync.Mutex
	fired    []bool
	restarts int // planned restarts done
	err      error
	acting   atomic.Int32
}

// newActions fires list and the workload's planned consumer restarts
// (through cons) over a stream of planned messages and the run's poison
// ones.
func newActions(c *cell, list []Action, cons consumers, planned int64) *actions {
	restarts := c.o.Spec.Faults.ConsumerRestarts
	info := CellInfo{Broker: c.broker, Strategy: c.name, Schema: c.id, Consumer: c.consumer, Topic: c.topic(), AppName: AppName(c.id)}
	if sc, ok := cons.(*serviceConsumers); ok {
		info.Service = sc
	}
	a := &actions{list: list, info: info, cons: cons, total: planned + int64(len(c.o.Stream.Poison)), t: c.t, notes: c.notes, fired: make([]bool, len(list))}
	// Spread the planned restarts over the stream: restart k fires once
	// that many of the planned messages have been answered.
	for k := 1; k <= restarts; k++ {
		a.restartAt = append(a.restartAt, planned*int64(k)/int64(restarts+1))
	}
	return a
}

// watch fires what is due every 20ms until everything fired or ctx ends.
func (a *actions) watch(ctx context.Context) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !a.allFired() || a.restartsPending() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.restartDue()
			a.fireDue(ctx)
		}
	}
}

// restartDue performs the planned restarts whose time has come.
func (a *actions) restartDue() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.restarts < len(a.restartAt) && a.t.handled.Load() >= a.restartAt[a.restarts] {
		a.cons.restart(a.restarts)
		a.restarts++
	}
}

// fireDue starts the next due action, unless one is running.
func (a *actions) fireDue(ctx context.Context) {
	if a.acting.Load() > 0 {
		return
	}
	handled := a.t.handled.Load()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.list {
		act := &a.list[i]
		if a.fired[i] {
			continue
		}
		if float64(handled) < act.At*float64(a.total) {
			return
		}
		a.fired[i] = true
		a.acting.Add(1)
		go a.run(ctx, act, handled)
		return
	}
}

// run performs one action on a context of its own: ending the cell must
// not cut a broker restart in half.
func (a *actions) run(ctx context.Context, act *Action, handled int64) {
	defer a.acting.Add(-1)
	defer a.t.settled.Add(1) // the stall timer restarts after a fault
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	rec, hit := a.faults.begin(act.Name)
	info := a.info
	info.Hit = hit
	err := act.Do(ctx, info)
	a.faults.finish(rec, err)
	if err != nil {
		a.notes.add(fmt.Sprintf("action %s: %v", act.Name, err))
		a.mu.Lock()
		a.err = errors.Join(a.err, fmt.Errorf("action %s: %w", act.Name, err))
		a.mu.Unlock()
		return
	}
	a.notes.add(fmt.Sprintf("action %s done with %d of %d messages answered", act.Name, handled, a.total))
}

func (a *actions) restartsPending() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.restarts < len(a.restartAt)
}

func (a *actions) allFired() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range a.fired {
		if !f {
			return false
		}
	}
	return true
}

// busy reports an action running or still to fire: the cell is not done.
// (Planned restarts do not hold a cell open: a stream cut short by a
// duration may never reach them.)
func (a *actions) busy() bool { return a.acting.Load() > 0 || !a.allFired() }

// failure joins the errors of the actions that failed.
func (a *actions) failure() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}
