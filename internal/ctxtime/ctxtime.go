// Package ctxtime waits for a while unless a context ends first: the one
// pause the runner, the drivers and the calibrations all need.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d and reports whether ctx was still live at its end; with d
// <= 0 it only reports that.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
