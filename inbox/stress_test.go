package inbox

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/inboxbench/inboxbench/envelope"
)

// TestConcurrentShuffledDeliveries: 32 goroutines deliver the same 2,000
// events (50 aggregates × 40 versions), each event by three of them, in
// shuffled order with parking on. Every aggregate must end at its final
// version and balance, every event must be in the inbox exactly once, and
// the outcomes must count exactly one effect per event.
func TestConcurrentShuffledDeliveries(t *testing.T) {
	const (
		goroutines = 32
		aggregates = 50
		versions   = 40
		copies     = 3
	)
	forEachCorrect(t, nil, func(t *testing.T, in *Inbox, s Strategy) {
		ctx := ctxT(t)
		rng := rand.New(rand.NewPCG(1, uint64(len(s.Name()))))
		var all []*envelope.Event
		want := map[string]int64{}
		for a := range aggregates {
			agg := fmt.Sprintf("agg-%02d", a)
			for v := int64(1); v <= versions; v++ {
				amount := int64(a*1000) + v
				all = append(all, ev(fmt.Sprintf("%s-v%d", agg, v), agg, v, amount))
				want[agg] += amount
			}
		}
		lists := make([][]*envelope.Event, goroutines)
		for _, e := range all {
			for _, g := range rng.Perm(goroutines)[:copies] {
				lists[g] = append(lists[g], e)
			}
		}
		for g := range lists {
			rng.Shuffle(len(lists[g]), func(i, j int) { lists[g][i], lists[g][j] = lists[g][j], lists[g][i] })
		}
		var mu sync.Mutex
		effects := map[string]int{}
		results := map[Result]int{}
		var wg sync.WaitGroup
		barrier := make(chan struct{})
		for g := range goroutines {
			wg.Go(func() {
				<-barrier
				l := lists[g]
				for len(l) > 0 {
					n := min(len(l), 20)
					outs, err := s.ApplyBatch(ctx, in, consumer, l[:n])
					l = l[n:]
					if err != nil {
						t.Errorf("goroutine %d: %v", g, err)
						return
					}
					mu.Lock()
					for _, o := range outs {
						results[o.Result]++
						if o.Result == Applied {
							effects[o.Key()]++
						}
						for _, d := range o.Drained {
							if d.Result == Applied {
								effects[d.Key()]++
							}
						}
					}
					mu.Unlock()
				}
			})
		}
		close(barrier)
		wg.Wait()
		if t.Failed() {
			return
		}
		for a := range aggregates {
			agg := fmt.Sprintf("agg-%02d", a)
			wantAccount(t, in, agg, want[agg], versions)
		}
		if n := inboxRows(t, in, consumer); n != aggregates*versions {
			t.Fatalf("inbox=%d, want %d", n, aggregates*versions)
		}
		if n := count(t, in, `SELECT count(*) FROM (SELECT DISTINCT source, event_id FROM %s.inbox WHERE consumer = $1) d`, consumer); n != aggregates*versions {
			t.Fatalf("distinct inbox keys=%d, want %d", n, aggregates*versions)
		}
		if p := parkedRows(t, in, consumer); p != 0 {
			t.Fatalf("parked=%d left over", p)
		}
		for _, e := range all {
			if effects[e.Key()] != 1 {
				t.Fatalf("event %s: %d effects reported, want exactly 1", e.Key(), effects[e.Key()])
			}
		}
		t.Logf("%s: results %v, counters %+v", s.Name(), results, in.Counters())
	})
}
