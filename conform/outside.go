package conform

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/runner"
)

// Faults from outside, which only a service under test can take: its
// instances are process groups of this machine, its broker connections
// pass through the suite's proxy. consumer-crash and db-connection-kill
// (faults.go) take their service's form here too.

func registerOutside() {
	register(&Scenario{Name: "instance-pause", Timeout: 4 * time.Minute, OutsideOnly: true,
		Proves: "an instance is stopped (SIGSTOP) for 25 s mid-stream, long enough for its broker to give its work to another, then continued: what it held comes again and is deduplicated, nothing lost or doubled",
		Needs:  outOfProcess,
		Run: func(ctx context.Context, c Cell) Outcome {
			return runStream(ctx, c, "", func(o *runner.Options, e *Env) {
				o.Spec.PublishRate = 100 // the stream goes on while the instance is stopped
				o.Stream.Actions = append(o.Stream.Actions, runner.Action{Name: "SIGSTOP instance 0 for 25s", At: 0.3,
					Do: func(ctx context.Context, ci runner.CellInfo) error {
						if ci.Service == nil {
							return errNoService
						}
						ci.Hit("instance 0 stopped")
						return ci.Service.Pause(ctx, 0, 25*time.Second)
					}})
			})
		}})
	register(&Scenario{Name: "connection-cut", Timeout: 4 * time.Minute, OutsideOnly: true,
		Proves: "the service's broker connections are cut twice mid-stream at the suite's proxy, each dropping what was in flight (acks, offset commits, deliveries): what was committed but not acknowledged comes again and is deduplicated, nothing lost or doubled",
		Needs: func(bc brokers.Capabilities) string {
			if !bc.OutsideProxied {
				return "hands an outside consumer broker addresses no proxy can stand in for: its connections cannot be cut"
			}
			return ""
		},
		Run: func(ctx context.Context, c Cell) Outcome {
			var cuts atomic.Int64
			out := runStream(ctx, c, "", func(o *runner.Options, e *Env) {
				o.Spec.PublishRate = 200 // acks and commits in flight when the cut comes
				cut := runner.Action{Name: "cut the service's broker connections", Do: func(ctx context.Context, ci runner.CellInfo) error {
					if ci.Service == nil {
						return errNoService
					}
					ci.Hit("every broker connection of the service cut")
					ok, err := ci.Service.CutBroker(ctx)
					if ok {
						cuts.Add(1)
					}
					return err
				}}
				twice(o, cut)
			})
			if out.Err == nil && cuts.Load() == 0 {
				return fail(errors.New("no connection passed the proxy: the scenario proved nothing"))
			}
			return out
		}})
}

var errNoService = errors.New("this fault needs a service under test")

// whileBusy adds fault f to a live stream (40 events/s) twice, each time
// while every instance of the service works through a backlog: all are
// stopped while 3 s of the stream builds, continued, and 100 ms later f
// fires. What an instance holds then is fresh work it was handed and
// has not committed, so a service that settled it first loses it.
func whileBusy(o *runner.Options, name string, f func(ctx context.Context, ci runner.CellInfo) error) {
	o.Spec.PublishRate = 40
	for _, at := range []float64{0.25, 0.6} {
		o.Stream.Actions = append(o.Stream.Actions, runner.Action{Name: name + ", busy with a backlog", At: at,
			Do: func(ctx context.Context, ci runner.CellInfo) error {
				if ci.Service == nil {
					return errNoService
				}
				if err := withBacklog(ctx, ci.Service, 3*time.Second); err != nil {
					return err
				}
				time.Sleep(100 * time.Millisecond)
				ci.Hit(name + " while it worked through a backlog")
				return f(ctx, ci)
			}})
	}
}

// withBacklog stops every instance for d, while the stream goes on, and
// continues them: they return to a backlog.
func withBacklog(ctx context.Context, s runner.ServiceControl, d time.Duration) error {
	return eachInstance(s, func(i int) error { return s.Pause(ctx, i, d) })
}

// eachInstance runs f for every instance at once.
func eachInstance(s runner.ServiceControl, f func(i int) error) error {
	errs := make([]error, s.Instances())
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// killInstances is consumer-crash (and crash-with-backlog) for a
// service: twice in a live stream
// (40 events/s), every instance is stopped (SIGSTOP) while a backlog of
// 3 s of the stream builds, continued, and 100 ms later, while they work
// through that backlog, every instance is killed with kill -9 and
// started again by the cell. The backlog leaves no chance in whether an
// instance held delivered work it had not committed, and killing every
// instance leaves none in whether the one that held it was hit (a
// single-active-consumer queue is held by one of them): a service that
// settled any of that work loses exactly that.
func killInstances(ctx context.Context, c Cell) Outcome {
	var killed atomic.Int64
	out := runStream(ctx, c, "", func(o *runner.Options, e *Env) {
		whileBusy(o, "kill -9 every instance", func(ctx context.Context, ci runner.CellInfo) error {
			if err := eachInstance(ci.Service, func(i int) error { return ci.Service.Kill(ctx, i) }); err != nil {
				return err
			}
			killed.Add(int64(ci.Service.Instances()))
			return nil
		})
	})
	if out.Err == nil && killed.Load() == 0 && !c.Broken() {
		return fail(errors.New("no instance was killed: the scenario proved nothing"))
	}
	if out.Err == nil {
		out.Line = fmt.Sprintf("%s: %s/%s instances=%d killed=%d", c.Scenario, c.Broker, c.Name(), c.Service.Instances, killed.Load())
	}
	return out
}
