package inbox

import (
	"context"
	"testing"
	"time"
)

// Checkpoints counts a CHECKPOINT the role runs: the reading a cell takes
// before and after it streams sees one more.
func TestCheckpointsCountsACheckpoint(t *testing.T) {
	in := newInbox(t, nil)
	ctx := context.Background()
	before, err := Checkpoints(ctx, in.pool)
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := Checkpoint(ctx, in.pool)
	if err != nil || !allowed {
		t.Fatalf("checkpoint: allowed %v, %v (the local stack grants pg_checkpoint)", allowed, err)
	}
	// The checkpointer reports its statistics once the checkpoint is
	// over, which the waiting backend may hear of first.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err := Checkpoints(ctx, in.pool)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints %d before and %d after a CHECKPOINT", before, after)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
