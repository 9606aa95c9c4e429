package inbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
)

const examplesDir = "../examples/strategies"

// fileStrategy loads an example file and prepares it in in's schema.
func fileStrategy(t testing.TB, in *Inbox, name string) *FileStrategy {
	t.Helper()
	s, err := LoadStrategyFile(filepath.Join(examplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctxT(t), in.Pool(), in.Schema()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStrategyFileDDLRunsOncePerSchema: bench worker processes each load
// the file and prepare the cell's schema; only the first runs the @ddl
// (idempotency.sql's CREATE FUNCTION would fail a second time).
func TestStrategyFileDDLRunsOncePerSchema(t *testing.T) {
	in := newInbox(t, parkingOff)
	fileStrategy(t, in, "idempotency.sql")
	other := fileStrategy(t, in, "idempotency.sql") // a second process
	outs, err := other.ApplyBatch(ctxT(t), in, "c", []*envelope.Event{ev("e1", "acct-1", 1, 5)})
	if err != nil || len(outs) != 1 || outs[0].Result != Applied {
		t.Fatalf("the second process applies with the DDL the first ran: %+v, %v", outs, err)
	}
}

// forEachExample runs f per correct example file, each in its own schema.
func forEachExample(t *testing.T, mutate func(*Options), f func(t *testing.T, in *Inbox, s Strategy)) {
	for _, name := range []string{"tx.sql", "cte.sql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := newInbox(t, mutate)
			f(t, in, fileStrategy(t, in, name))
		})
	}
}

// mixedStream is a deterministic sequence exercising every decision with
// parking off: in-order increments, redeliveries, gaps (applied once their
// predecessor came), stale new ids, and snapshots older and newer.
func mixedStream() []*envelope.Event {
	rng := rand.New(rand.NewPCG(42, 7))
	var out []*envelope.Event
	next := map[string]int64{}
	var sent []*envelope.Event
	for i := range 400 {
		agg := fmt.Sprintf("acc-%d", rng.IntN(6))
		switch r := rng.IntN(10); {
		case r < 5 || len(sent) == 0:
			next[agg]++
			v := next[agg]
			e := ev(fmt.Sprintf("%s-v%d", agg, v), agg, v, int64(1+rng.IntN(50)))
			if v > 1 && rng.IntN(6) == 0 {
				e = snap(e.ID, agg, v, int64(100+rng.IntN(1000)))
			}
			out = append(out, e)
			sent = append(sent, e)
		case r < 7: // a redelivery of something sent
			c := *sent[rng.IntN(len(sent))]
			c.Attempt = 1
			out = append(out, &c)
		case r < 8: // a gap: a version two ahead (applied later, once reached)
			v := next[agg] + 2
			out = append(out, ev(fmt.Sprintf("%s-v%d", agg, v), agg, v, 3))
		case r < 9: // stale: a new id carrying an old version
			out = append(out, ev(fmt.Sprintf("%s-stale-%d", agg, i), agg, max(next[agg], 1), 7))
		default: // an older snapshot
			out = append(out, snap(fmt.Sprintf("%s-oldsnap-%d", agg, i), agg, max(next[agg]-1, 1), 999))
		}
	}
	return out
}

type tableDump struct {
	Accounts []string
	Inbox    []string
}

func dumpTables(t *testing.T, in *Inbox) tableDump {
	t.Helper()
	var d tableDump
	q := fmt.Sprintf("%q", in.Schema())
	for _, x := range []struct {
		sql string
		dst *[]string
	}{
		{"SELECT id || ' ' || balance || ' v' || version FROM " + q + ".account ORDER BY id", &d.Accounts},
		{"SELECT consumer || ' ' || source || ' ' || event_id || ' ' || aggregate_id || ' v' || aggregate_version FROM " + q + ".inbox ORDER BY 1", &d.Inbox},
	} {
		rows, err := in.Pool().Query(context.Background(), x.sql)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			*x.dst = append(*x.dst, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestStrategyFileExamplesMatchBuiltins runs the same events through each
// example file and its built-in twin and requires the same result for
// every event and the same accounts and inbox rows at the end.
func TestStrategyFileExamplesMatchBuiltins(t *testing.T) {
	for _, tc := range []struct{ file, builtin string }{{"tx.sql", "tx"}, {"cte.sql", "cte"}} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			fileIn, builtIn := newInbox(t, parkingOff), newInbox(t, parkingOff)
			fs, bs := fileStrategy(t, fileIn, tc.file), mustStrategy(t, tc.builtin)
			stream := mixedStream()
			// Events that came too early are redelivered after each pass,
			// as a broker would, until nothing changes.
			pending := stream
			got := map[Result]int{}
			for pass := 0; len(pending) > 0 && pass < 20; pass++ {
				var again []*envelope.Event
				for i, e := range pending {
					fo := apply(t, fileIn, fs, consumer, e)
					bo := apply(t, builtIn, bs, consumer, e)
					if fo.Result != bo.Result {
						t.Fatalf("pass %d event %d %s (%s %s v%d): file %s, built-in %s", pass, i, e.ID, e.Kind, e.Subject, e.AggregateVersion, fo.Result, bo.Result)
					}
					got[fo.Result]++
					if fo.Result == Gap {
						again = append(again, e)
					}
				}
				pending = again
			}
			sameEnd(t, got, fileIn, builtIn)
			t.Logf("%s ≡ %s over %d events: %v", tc.file, tc.builtin, len(stream), got)
		})
	}
}

// sameEnd checks that a stream exercised every decision and left the file
// and the built-in strategy with the same tables.
func sameEnd(t *testing.T, got map[Result]int, fileIn, builtIn *Inbox) {
	t.Helper()
	for _, r := range []Result{Applied, Duplicate, Gap, Stale} {
		if got[r] == 0 {
			t.Errorf("the stream never produced %s (results %v): it must exercise every decision", r, got)
		}
	}
	if f, b := dumpTables(t, fileIn), dumpTables(t, builtIn); !reflect.DeepEqual(f, b) {
		t.Fatalf("final state differs:\nfile     %v\nbuilt-in %v", f, b)
	}
}

// TestBatchFileMatchesBuiltinBatch runs the same stream in batches through
// examples/strategies/batch.sql and the built-in batch strategy: the same
// result for every event, and the same accounts and inbox rows at the end,
// with and without snapshots.
func TestBatchFileMatchesBuiltinBatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snapshot bool
	}{{"increments", false}, {"with snapshots", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fileIn, builtIn := newInbox(t, parkingOff), newInbox(t, parkingOff)
			fs, bs := fileStrategy(t, fileIn, "batch.sql"), mustStrategy(t, "batch")
			var stream []*envelope.Event
			for _, e := range mixedStream() {
				if e.Kind == envelope.Snapshot && !tc.snapshot {
					continue
				}
				stream = append(stream, e)
			}
			pending, got := stream, map[Result]int{}
			for pass := 0; len(pending) > 0 && pass < 40; pass++ {
				var again []*envelope.Event
				for start := 0; start < len(pending); start += 7 {
					chunk := pending[start:min(start+7, len(pending))]
					fo, ferr := fs.ApplyBatch(context.Background(), fileIn, consumer, chunk)
					bo, berr := bs.ApplyBatch(context.Background(), builtIn, consumer, chunk)
					if ferr != nil || berr != nil {
						t.Fatalf("file: %v; built-in: %v", ferr, berr)
					}
					for i, e := range chunk {
						if fo[i].Result != bo[i].Result {
							t.Fatalf("pass %d %s (%s v%d): file %s, built-in %s", pass, e.ID, e.Subject, e.AggregateVersion, fo[i].Result, bo[i].Result)
						}
						got[fo[i].Result]++
						if fo[i].Result == Gap || bo[i].Result == Gap {
							again = append(again, e)
						}
					}
				}
				pending = again
			}
			sameEnd(t, got, fileIn, builtIn)
			t.Logf("batch.sql ≡ batch over %d events in batches of 7: %v", len(stream), got)
		})
	}
}

// TestBatchFileParksLikeBuiltinBatch is the same comparison with parking
// on: a chunk hands batch.sql the parked events of its aggregates, as the
// built-in decides its parked events beside the batch, and deletes the
// ones the file decided. Every event then took effect once, in both, and
// the accounts, inbox rows and what stays parked are the same; most of
// the file's parked events were released by a batch, not drained one by
// one afterwards.
func TestBatchFileParksLikeBuiltinBatch(t *testing.T) {
	fileIn, builtIn := newInbox(t, nil), newInbox(t, nil)
	fs, bs := fileStrategy(t, fileIn, "batch.sql"), mustStrategy(t, "batch")
	var stream []*envelope.Event
	for _, e := range mixedStream() {
		if e.Kind != envelope.Snapshot {
			stream = append(stream, e)
		}
	}
	applied := map[string]int{}
	inBatch := 0
	count := func(name string, outs []Outcome, batch bool) {
		for _, o := range outs {
			if o.Result == Applied {
				applied[name]++
			}
			for _, d := range o.Drained {
				if d.Result == Applied {
					applied[name]++
					if batch {
						inBatch++
					}
				}
			}
		}
	}
	for start := 0; start < len(stream); start += 7 {
		chunk := stream[start:min(start+7, len(stream))]
		fo, ferr := fs.ApplyBatch(ctxT(t), fileIn, consumer, chunk)
		bo, berr := bs.ApplyBatch(ctxT(t), builtIn, consumer, chunk)
		if ferr != nil || berr != nil {
			t.Fatalf("file: %v; built-in: %v", ferr, berr)
		}
		count("file", fo, true)
		count("built-in", bo, false)
	}
	fd, ferr := DrainParkedWith(ctxT(t), fs, fileIn, consumer)
	bd, berr := DrainParkedWith(ctxT(t), bs, builtIn, consumer)
	if ferr != nil || berr != nil {
		t.Fatalf("final drain: file: %v; built-in: %v", ferr, berr)
	}
	count("file", fd, false)
	count("built-in", bd, false)
	if applied["file"] != applied["built-in"] || applied["file"] == 0 {
		t.Fatalf("applied: file %d, built-in %d", applied["file"], applied["built-in"])
	}
	if f, b := dumpTables(t, fileIn), dumpTables(t, builtIn); !reflect.DeepEqual(f, b) {
		t.Fatalf("final state differs:\nfile     %v\nbuilt-in %v", f, b)
	}
	parked := func(in *Inbox) (n int) {
		if err := in.Pool().QueryRow(ctxT(t), fmt.Sprintf("SELECT count(*) FROM %q.parked", in.Schema())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if f, b := parked(fileIn), parked(builtIn); f != b {
		t.Fatalf("still parked: file %d, built-in %d", f, b)
	}
	if inBatch == 0 {
		t.Fatal("no parked event was applied by the batch that carried its predecessor")
	}
	t.Logf("%d applied in each, %d of the file's parked events applied by a later batch", applied["file"], inBatch)
}

// The article's experiments for the example files (see
// experiments_test.go for the built-ins).

func TestStrategyFileExperimentDuplicate(t *testing.T) {
	forEachExample(t, parkingOff, experimentDuplicate)
}

func TestStrategyFileExperimentSplit(t *testing.T) {
	file := func(name string) func(*testing.T, *Inbox) Strategy {
		return func(t *testing.T, in *Inbox) Strategy { return fileStrategy(t, in, name) }
	}
	experimentSplit(t, parkingOff, []splitCase{
		{"broken-split.sql", file("broken-split.sql"), Duplicate, 0, 0}, // the article's bug
		{"tx.sql", file("tx.sql"), Applied, 10, 1},                      // the claim rolled back with the update
	})
}

func TestStrategyFileExperimentConcurrent(t *testing.T) {
	forEachExample(t, parkingOff, experimentConcurrent)
}

func TestStrategyFileExperimentOrder(t *testing.T) {
	forEachExample(t, parkingOff, experimentOrder)
}

// TestStrategyFileConcurrentVersions: many goroutines apply one
// aggregate's versions in random order, redelivering gaps, as consumers
// would; each version takes effect once, in order.
func TestStrategyFileConcurrentVersions(t *testing.T) {
	forEachExample(t, parkingOff, func(t *testing.T, in *Inbox, s Strategy) {
		ctx := ctxT(t)
		const versions = 40
		var want int64
		evs := make(chan *envelope.Event, versions)
		for v := int64(1); v <= versions; v++ {
			want += v
			evs <- ev(fmt.Sprintf("cv-%d", v), "acc-c", v, v)
		}
		close(evs)
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied := 0
		for range 4 {
			wg.Go(func() {
				for e := range evs {
					for {
						o, err := in.Apply(ctx, s, consumer, e)
						if err != nil {
							t.Error(err)
							return
						}
						if o.Result == Applied {
							mu.Lock()
							applied++
							mu.Unlock()
						}
						if o.Result != Gap {
							break
						}
					}
				}
			})
		}
		wg.Wait()
		if applied != versions {
			t.Fatalf("%d applied, want %d", applied, versions)
		}
		wantAccount(t, in, "acc-c", want, versions)
	})
}

func TestStrategyFilePrune(t *testing.T) {
	in := newInbox(t, parkingOff)
	s := fileStrategy(t, in, "tx.sql")
	if !s.HasPrune() {
		t.Fatal("tx.sql has a @prune section")
	}
	for v := int64(1); v <= 5; v++ {
		expect(t, apply(t, in, s, consumer, ev(fmt.Sprintf("p-%d", v), "acc-p", v, 1)), Applied)
	}
	n, err := s.Prune(ctxT(t), in, time.Now().Add(time.Hour), 3)
	if err != nil || n != 3 {
		t.Fatalf("prune: %d rows, %v; want 3", n, err)
	}
	if left := inboxRows(t, in, consumer); left != 2 {
		t.Fatalf("inbox=%d after pruning 3 of 5", left)
	}
}
