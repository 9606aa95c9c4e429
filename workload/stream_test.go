package workload

import (
	"reflect"
	"testing"
)

func TestStreamContinuesTheAggregates(t *testing.T) {
	s := Defaults()
	s.Seed, s.Aggregates, s.Events = 7, 20, 500
	s.SnapshotRatio, s.Faults.DuplicateRepublish = 0.1, 0.02
	st := NewStream(&s)
	defer st.Close()
	first, second := st.Next(), st.Next()
	if g := Generate(&s); !reflect.DeepEqual(first.Publishes, g.Publishes) || !reflect.DeepEqual(first.Expected, g.Expected) {
		t.Fatal("the stream's first chunk is not Generate's plan")
	}
	again := NewStream(&s)
	defer again.Close()
	again.Next()
	if !reflect.DeepEqual(again.Next().Publishes, second.Publishes) {
		t.Fatal("the same seed gave another second chunk")
	}
	// Versions continue without a gap or a repeat, and the joined plan's
	// oracle is every event replayed in version order.
	all := Concat([]*Plan{first, second})
	if len(all.Events) != 2*s.Events || len(all.Publishes) != len(first.Publishes)+len(second.Publishes) {
		t.Fatalf("joined plan: %d events, %d sends", len(all.Events), len(all.Publishes))
	}
	if !reflect.DeepEqual(replay(t, all.Events), all.Expected) {
		t.Fatal("the joined plan's oracle is not the replay of its events")
	}
	if second.Events[0].Time.Before(first.Events[len(first.Events)-1].Time) {
		t.Fatal("the second chunk's events occur before the first's")
	}
}
